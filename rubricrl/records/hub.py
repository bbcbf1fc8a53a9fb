"""Datasets as record inputs (the reader in `rubricrl.records` dispatches here): a saved Hugging Face dataset
folder, a dataset repository folder, or a Hugging Face Hub dataset id, named by one string (`dataset_source`) and
read through `datasets` into the reader's `Record`s; `describe_input` says what such an input resolved to."""

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rubricrl.records.files import BATCH_ROWS, Record, RecordFileError, table_rows

# One string names a dataset and what to read of it, in the order `load_dataset(path, name, split, revision=...)`
# takes them and with the separators the Hub itself uses (a revision after `@` as in `hf://datasets/org/name@rev`;
# subset before split as in the dataset viewer's `.../viewer/SUBSET/SPLIT`):
#   org/name                 the `train` split, or the only split
#   org/name:test            the split `test`
#   org/name:RuRL/train      subset (config) `RuRL`, split `train`;  org/name:RuRL/  its train or only split
#   org/name@v1.0:test       at a revision (branch, tag or commit)
#   hf://datasets/org/name/path/file.jsonl   one data file in a repository (HealthBench keeps several schemas in one)
#   ./folder:test            a dataset repository folder or a saved dataset folder, with a split (no revision)
# A path that exists is always read as it is. No `&` or `?` (a shell would split or glob them unquoted).

HUB_URL = re.compile(r"hf:/{1,2}datasets/(?P<rest>.+)")  # pathlib folds `hf://` into `hf:/`: both are taken
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".arrow", ".txt", ".tsv")
OUTPUT_MARKERS = ("manifest.json", "fingerprint.json")  # a rubricrl output folder: name the file in it instead
_LOADED: dict[str, str] = {}
"""What each named dataset resolved to (`describe_input`), filled as it is opened."""


@dataclass(frozen=True)
class DatasetSource:
    """A dataset named by a Hub id or a local folder, with what to read of it."""

    path: str
    """`org/name`, or the folder."""
    hub: bool
    subset: str | None = None
    split: str | None = None
    revision: str | None = None
    file: str | None = None
    """One data file inside a Hub repository (`hf://datasets/org/name/FILE`)."""
    text: str = ""
    """As the user wrote it, for messages."""

    def label(self, split: str | None = None) -> str:
        """The source as messages name it: `org/name (train)`, `org/name@v1 (RuRL/train)`, `folder (test)`."""
        part = "/".join(str(p) for p in (self.subset, split or self.split) if p)  # a split may be a NamedSplit
        return self.spec(revision=self.revision, selection=False) + (f" ({part})" if part else "")

    def spec(self, split: str | None = None, revision: str | None = None, selection: bool = True) -> str:
        """The string that names this dataset as an input (with `revision`, e.g. the commit it resolved to, the
        same rows again): `org/name@<sha>:RuRL/train`."""
        name = f"hf://datasets/{self.path}" if self.file else self.path
        at = f"@{revision}" if revision else ""
        file = f"/{self.file}" if self.file else ""
        split = split or self.split
        chosen = f"{self.subset}/{split or ''}" if self.subset else split or ""
        return f"{name}{at}{file}" + (f":{chosen}" if selection and chosen else "")


def dataset_source(value: str | Path) -> DatasetSource | None:
    """The dataset a path that does not exist names, or None when it names a missing file (`runs/x.jsonl`, a path
    under a folder that exists, anything not shaped `org/name`): those stay "no such file"."""
    text = str(value)
    forced = HUB_URL.fullmatch(text)
    rest = forced["rest"] if forced else text
    if not forced and rest.lower().endswith(DATA_SUFFIXES):
        return None
    head, _, selector = rest.partition(":")
    parts = head.split("/")
    repo, file = ("/".join(parts[:2]), "/".join(parts[2:]) or None) if forced else (head, None)
    repo, at, revision = repo.partition("@")
    if at and not revision:
        raise RecordFileError(f"{text}: nothing after '@'; write org/name@REVISION (a branch, tag or commit)")
    if selector.count("/") > 1 or ":" in selector:
        raise RecordFileError(f"{text}: expected NAME:SPLIT or NAME:SUBSET/SPLIT after the dataset, got {selector!r}")
    subset, _, split = selector.rpartition("/") if "/" in selector else ("", "", selector)
    named = dict(subset=subset or None, split=split or None, revision=revision or None, text=text)
    if not forced:
        local = Path(repo).expanduser()
        if local.is_dir() and (selector or revision):
            if revision:
                raise RecordFileError(
                    f"{text}: a revision (@...) selects a version of a Hub dataset; the folder {repo} is read as it is"
                )
            return DatasetSource(str(local), hub=False, **named)
        if local.exists():
            raise RecordFileError(f"{text}: {repo} is a file; ':SPLIT' selects within a dataset folder or a Hub id")
        # a path under a folder that exists, or not shaped org/name, is a missing local file
        if not HUB_ID.fullmatch(repo) or local.parent.is_dir() and str(local.parent) != ".":
            return None
    elif not HUB_ID.fullmatch(repo):
        raise RecordFileError(f"{text}: expected hf://datasets/org/name[@REVISION][/FILE]")
    return DatasetSource(repo, hub=True, file=file, **named)


def describe_input(value: str | Path) -> str:
    """What an input was, for a manifest or provenance: a local file or folder as an absolute path; a Hub dataset
    as a string that reads the same rows again, with the commit it resolved to once opened
    (`org/name@<sha>:RuRL/train`); a folder read with a split, with the split (`/abs/folder:test`)."""
    text = str(value)
    if str(Path(text)) in _LOADED:  # keyed as the reader got it: a Path (which folds `hf://` into `hf:/`)
        return _LOADED[str(Path(text))]
    path = Path(text)
    return str(path.resolve()) if path.exists() or dataset_source(text) is None else text


def _datasets(where: str):
    try:
        import datasets  # only here: `datasets` is an optional dependency (the `train` extra)
    except ImportError:
        raise RecordFileError(
            f"{where}: reading a dataset folder or a Hub dataset needs the `datasets` package "
            "(pip install 'rubricrl[train]')"
        ) from None
    return datasets


def _is_saved(folder: Path) -> bool:
    """A `save_to_disk` folder (read with load_from_disk; load_dataset would read its Arrow shards as data files)."""
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def _file_hint(folder: Path) -> str:
    """For an error about a folder given as input: the data file in it to name instead, if there is one."""
    inside = sorted(p.name for p in folder.glob("*") if p.suffix in (".parquet", ".jsonl") and p.is_file())
    return f"; to read a file in it, name the file (e.g. {folder / inside[0]})" if inside else ""


def folder_rows(path: Path, named: DatasetSource | None) -> tuple[str, list[str] | None, Iterator[Record]]:
    """A saved dataset (`save_to_disk`), or a folder in a dataset repository's layout (what `hf download
    --repo-type dataset` leaves: a README card with `configs:`, `data/train-*.parquet`, or data files at the top),
    read by load_dataset as it reads the same repository on the Hub."""
    if _is_saved(path):
        return _dataset_rows(path, named)
    if any((path / name).is_file() for name in OUTPUT_MARKERS):
        raise RecordFileError(
            f"{path}: not a saved Hugging Face dataset or a dataset repository folder but the "
            f"output folder of a run{_file_hint(path)}"
        )
    return named_rows(named or DatasetSource(str(path), hub=False, text=str(path)))


def _dataset_rows(path: Path, named: DatasetSource | None = None) -> tuple[str, list[str], Iterator[Record]]:
    datasets = _datasets(str(path))
    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError as error:
        raise RecordFileError(
            f"{path}: not a saved Hugging Face dataset (no dataset_info.json/state.json or "
            f"dataset_dict.json){_file_hint(path)}"
        ) from error
    if named is not None and named.subset:
        raise RecordFileError(f"{named.text}: a saved dataset has no subsets; name a split (FOLDER:SPLIT)")
    source = str(path)
    wanted = named.split if named is not None else None
    if isinstance(loaded, datasets.DatasetDict):
        split = _pick_split(path, list(loaded), wanted)
        loaded, source = loaded[split], f"{path} (split {split!r})"
        _LOADED[named.text if named else str(path)] = f"{path.resolve()}:{split}"
    elif wanted:
        raise RecordFileError(f"{named.text}: a saved dataset of one split; read the folder {path} itself")
    batches = loaded.with_format("arrow").iter(batch_size=BATCH_ROWS)
    return source, loaded.column_names, table_rows(batches)


def _pick_split(where: Any, splits: list[str], wanted: str | None = None, how: str = "") -> str:
    if wanted is not None:
        if wanted not in splits:
            raise RecordFileError(f"{where}: no split {wanted!r}; its splits: {', '.join(splits)}")
        return wanted
    if "train" in splits:
        return "train"
    if len(splits) == 1:
        return splits[0]
    raise RecordFileError(
        f"{where}: a dataset with splits {splits} and no 'train'; " + (how or "save the split to use on its own")
    )


def named_rows(named: DatasetSource) -> tuple[str, list[str] | None, Iterator[Record]]:
    """Rows of a Hub dataset or a repository folder, through `datasets.load_dataset`'s builder. A Hub dataset is
    downloaded once into the Hugging Face cache and read memory-mapped (memory stays flat; a second pass, as synth
    and ruft build make, and an offline rerun read the cache); a local folder is streamed from its files (no copy)."""
    datasets = _datasets(named.text)
    try:
        builder, named = _resolve(datasets, named)
        if named.hub:
            builder.download_and_prepare()
            loaded = builder.as_dataset(split=named.split)
        else:
            loaded = builder.as_streaming_dataset(split=named.split)
    except RecordFileError:
        raise
    except Exception as error:  # the boundary to `datasets` and the Hub: one line, never a traceback
        raise RecordFileError(_load_problem(named, error)) from None
    sha = builder.hash if named.hub and re.fullmatch(r"[0-9a-f]{40}", str(builder.hash)) else None
    _LOADED[named.text] = (
        named.spec(revision=sha or named.revision)
        if named.hub
        else replace(named, path=str(Path(named.path).resolve())).spec()
    )
    source = named.label()
    batches = loaded.with_format("arrow").iter(batch_size=BATCH_ROWS)
    return source, loaded.column_names, _guarded(table_rows(batches), source)


def _resolve(datasets, named: DatasetSource) -> tuple[Any, DatasetSource]:
    """The builder and the subset and split to read. One name after the colon is a split, or, when no split has
    that name (or the dataset has no default subset), a subset, read at its `train` or only split."""
    one_name = named.subset is None and named.split is not None
    try:
        builder = _builder(datasets, named)
    except ValueError as error:
        if not (one_name and "Config name is missing" in str(error)):
            raise
        named = replace(named, subset=named.split, split=None)
        builder = _builder(datasets, named)
    splits = list(builder.config.data_files or ()) or list(builder.info.splits or ())
    subsets = list(builder.builder_configs)
    if one_name and named.subset is None and named.split not in splits and named.split in subsets:
        named = replace(named, subset=named.split, split=None)
        builder = _builder(datasets, named)
        splits = list(builder.config.data_files or ()) or list(builder.info.splits or ())
    if named.split is not None and named.split not in splits:
        others = f"; its subsets: {', '.join(subsets)}" if one_name and len(subsets) > 1 else ""
        raise RecordFileError(f"{named.text}: no split {named.split!r}; its splits: {', '.join(splits)}{others}")
    example = f"{named.path}:{named.subset}/SPLIT" if named.subset else f"{named.path}:SPLIT"
    split = _pick_split(named.text, splits, named.split, f"name one: {example}") if splits else named.split or "train"
    return builder, replace(named, split=split)


def _builder(datasets, named: DatasetSource):
    import logging

    # a dataset card without YAML (most local folders, HealthBench's) is normal here, not worth a warning per read
    logging.getLogger("huggingface_hub.repocard").setLevel(logging.ERROR)
    if named.file:
        kind = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}.get(Path(named.file).suffix)
        if kind is None:
            raise RecordFileError(f"{named.text}: expected a .jsonl, .json, .parquet or .csv file in the repository")
        at = f"@{named.revision}" if named.revision else ""
        return datasets.load_dataset_builder(kind, data_files={"train": f"hf://datasets/{named.path}{at}/{named.file}"})
    try:
        return datasets.load_dataset_builder(named.path, named.subset, revision=named.revision)
    except ValueError as error:
        found = re.search(r"BuilderConfig '.*' not found\. Available: \[(.*)\]", str(error))
        if found is None:
            raise
        subsets = ", ".join(name.strip().strip("'") for name in found[1].split(","))
        raise RecordFileError(f"{named.text}: no subset {named.subset!r}; its subsets: {subsets}") from None


def _load_problem(named: DatasetSource, error: Exception) -> str:
    """One line for a dataset that cannot be loaded, saying what to do."""
    where = named.text or named.path
    text = " ".join(str(error).split())
    if not named.hub:
        if isinstance(error, FileNotFoundError) and ("data file" in text or "doesn't contain" in text):
            return (
                f"{where}: not a saved Hugging Face dataset (no dataset_info.json/state.json or "
                "dataset_dict.json) nor a dataset repository folder (no README.md with configs:, no data/ "
                "folder, no .parquet/.jsonl files at the top)"
            )
        return f"{where}: cannot read as a dataset folder: {type(error).__name__}: {text[:400]}"
    if isinstance(error, ConnectionError) or "Couldn't reach" in text:
        offline = (
            " (HF_HUB_OFFLINE is set)"
            if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "on", "yes")
            else ""
        )
        return (
            f"{where}: cannot reach the Hugging Face Hub{offline}, and this dataset is not in the local cache; "
            f"run once with network (later runs read the cache, also with HF_HUB_OFFLINE=1), or download it "
            f"where there is network (hf download {named.path} --repo-type dataset --local-dir DIR) and pass "
            f"the folder DIR"
        )
    if "Couldn't find cache" in text:  # offline, and this subset was never loaded
        return f"{where}: {text}; run once with network to cache it"
    if type(error).__name__ == "DatasetNotFoundError":
        return f"{where}: no such file or folder here, and on the Hugging Face Hub: {text}"
    if "Config name is missing" in text or "BuilderConfig" in text:
        return f"{where}: {text.split(' Example of usage')[0]}; name the subset: {named.path}:SUBSET/SPLIT"
    hint = (
        "; a repository with files of several schemas: name one file, hf://datasets/ORG/NAME/FILE"
        if "Cast" in type(error).__name__
        else ""
    )
    return f"{where}: cannot load from the Hugging Face Hub: {type(error).__name__}: {text[:400]}{hint}"


def _guarded(records: Iterator[Record], source: str) -> Iterator[Record]:
    """Rows of a streamed dataset; a file that breaks mid-way (a bad JSON line, a lost connection) is named with
    how far it read instead of raising from inside `datasets`."""
    count = 0
    try:
        for record in records:
            count += 1
            yield record
    except RecordFileError:
        raise
    except Exception as error:
        text = " ".join(str(error).split())[:400]
        raise RecordFileError(f"{source}: after row {count}: cannot read: {type(error).__name__}: {text}") from None
