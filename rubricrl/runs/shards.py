"""`--shard i/n`: a deterministic split of a dataset by id, so n machines (a Slurm array, say) each run a part and
`rubricrl merge` joins them. A row's shard is `int(sha256(id)) mod n`, from the id alone, so neither input order nor
rejected rows move an id, and the n shards hold every id exactly once. Shards count from 0, as SLURM_ARRAY_TASK_ID
does with `--array=0-(n-1)`.
"""

import hashlib
from dataclasses import dataclass

from rubricrl.config import ConfigError


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def __contains__(self, row_id: str) -> bool:
        return shard_of(row_id, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(row_id: str, count: int) -> int:
    return int.from_bytes(hashlib.sha256(row_id.encode("utf-8")).digest()[:8], "big") % count


def parse_shard(text: str | None, flag: str = "--shard") -> Shard | None:
    """`"2/8"` -> Shard(2, 8); None stays None (the whole dataset). Raises ConfigError for anything else."""
    if text is None:
        return None
    index, sep, count = str(text).partition("/")
    try:
        shard = Shard(int(index), int(count))
    except ValueError:
        shard = None
    if not sep or shard is None or shard.count < 1 or not 0 <= shard.index < shard.count:
        raise ConfigError(f"{flag} {text}: expected i/n with 0 <= i < n (e.g. 0/4 ... 3/4)")
    return shard
