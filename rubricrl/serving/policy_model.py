"""What `rubricrl eval --policy` names: a Hub id, a model folder (a `ruft train` or `rurl train` output), or a LoRA
adapter folder (a training checkpoint), checked before any server starts. An adapter is merged into its base once,
into $RUBRICRL_HOME/merged/ (named by the adapter's and the base's fingerprints: retrained weights merge again), and
served as a model: vLLM's CPU build and a GPU one serve it alike, whatever the adapter's rank or target modules."""

import hashlib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

from rubricrl.errors import UserError
from rubricrl.home import rubricrl_home
from rubricrl.serving.server import served_name_for

HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")
WEIGHTS = ("*.safetensors", "pytorch_model*.bin", "*.bin.index.json")  # not training_args.bin, which has none


def local_policy(value: str, base: str | None = None, flag: str = "--policy") -> Path | None:
    """The model folder to serve for `value`, merging an adapter first; None for a Hub id (an endpoint's model, or
    one the local server downloads). A path that is not there, a folder that holds no model, or an adapter whose base
    cannot be found is a one-line error."""
    path = Path(value).expanduser()
    if not path.exists():
        if _looks_like_a_path(value):
            first = value.split("/")[0]
            read = f" (read as a path: {first}/ is a folder here)" if HUB_ID.fullmatch(value) else ""
            raise UserError(f"{flag} {value}: no such folder{read}")
        return None
    if not path.is_dir():
        raise UserError(f"{flag} {value}: a file, not a model folder")
    if (path / "config.json").is_file():
        if not _has_weights(path):
            raise UserError(f"{flag} {value}: the folder has a config.json but no weights (*.safetensors or *.bin)")
        return path
    if (path / "adapter_config.json").is_file():
        return merged_adapter(path, base, flag)
    raise UserError(
        f"{flag} {value}: the folder holds no model (neither a config.json nor a LoRA adapter's adapter_config.json)"
    )


def merged_adapter(adapter: Path, base: str | None, flag: str) -> Path:
    """The adapter merged into `base` (default: the base its adapter_config.json names), made once and kept."""
    try:
        named = json.loads((adapter / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as error:
        raise UserError(f"{flag} {adapter}: adapter_config.json cannot be read: {error}") from None
    base = base or named
    if base and base.startswith("~"):
        base = str(Path(base).expanduser())  # transformers does not expand it
    if not base:
        raise UserError(f"{flag} {adapter}: a LoRA adapter that names no base model; give it with --policy-base MODEL")
    if _looks_like_a_path(base) and not (Path(base).expanduser() / "config.json").is_file():
        raise UserError(
            f"{flag} {adapter}: a LoRA adapter whose base model {base} is not there; give the base with "
            "--policy-base MODEL (a folder or a Hub id)"
        )
    digest = hashlib.sha256(served_name_for(base).encode()).hexdigest()[:8]
    target = rubricrl_home() / "merged" / f"{served_name_for(str(adapter))}+{digest}"
    if (target / "config.json").is_file():
        return target
    print(f"[rubricrl] merging the LoRA adapter {adapter} into its base {base}: {target}", file=sys.stderr, flush=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".merging-", dir=target.parent))
    try:
        try:
            _merge(adapter, base, work)
        except (OSError, ValueError, RuntimeError) as error:  # a base not found, or one the adapter does not fit
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise UserError(f"{flag} {adapter}: merging the LoRA adapter into {base} failed: {first[:300]}") from None
        try:
            work.rename(target)  # whole or absent: an interrupted merge leaves only a hidden folder
        except OSError:  # another process merged it meanwhile (rename onto a full folder fails)
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _merge(adapter: Path, base: str, into: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base, dtype="auto")  # the dtype the base was saved in
    PeftModel.from_pretrained(model, str(adapter)).merge_and_unload().save_pretrained(into)
    tokenizer = adapter if (adapter / "tokenizer_config.json").is_file() else base  # trainers save theirs beside it
    AutoTokenizer.from_pretrained(str(tokenizer)).save_pretrained(into)


def _looks_like_a_path(value: str) -> bool:
    """Not a Hub id (`org/name`, `name`), or one whose first part is a folder here (`runs/model`)."""
    if value.startswith(("/", ".", "~")) or not HUB_ID.fullmatch(value):
        return True
    return "/" in value and Path(value.split("/")[0]).is_dir()


def _has_weights(folder: Path) -> bool:
    return any(next(folder.glob(pattern), None) for pattern in WEIGHTS)
