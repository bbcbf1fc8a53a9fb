"""The one place that draws: matplotlib's Agg `Figure` objects (no pyplot state, no display, nothing shared between
threads), the package's plot kinds, and PNG out as bytes (the report's data: URIs) or a file. matplotlib comes with
the `train` extra and is imported inside the functions; without it a caller checks `available()` and leaves the
picture out (its numbers are in a table or a JSON file beside it)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def figure(width: float = 6.4, height: float = 3.6):
    """(figure, axis): one plot on a figure of this size in inches, at 100 dpi."""
    from matplotlib.figure import Figure

    drawn = Figure(figsize=(width, height), dpi=100)
    return drawn, drawn.subplots()


def png(drawn) -> bytes:
    """The figure as PNG, cropped to what is drawn."""
    import io

    buffer = io.BytesIO()
    drawn.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def save_png(drawn, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png(drawn))
    return path


def curves(
    axis,
    lines: dict[str, Sequence[tuple[float, float]]],
    errors: dict[str, Sequence[float]] | None = None,
    **style: Any,
) -> None:
    """One line per series of (step, value); a band of ± error where `errors` has one value per point (a bar where
    there is one point). `style` goes to every line (marker, linestyle, alpha ...)."""
    from matplotlib.ticker import MaxNLocator

    for label, points in lines.items():
        if not points:
            continue
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        (line,) = axis.plot(
            xs, ys, **{"marker": "o" if len(points) < 30 else None, "markersize": 3, "label": short(label), **style}
        )
        spread = (errors or {}).get(label) or []
        if len(spread) == len(ys) and len(ys) > 1:
            low, high = [y - e for y, e in zip(ys, spread)], [y + e for y, e in zip(ys, spread)]
            axis.fill_between(xs, low, high, color=line.get_color(), alpha=0.15)
        elif len(spread) == len(ys):
            axis.errorbar(xs, ys, yerr=spread, color=line.get_color(), capsize=3, linestyle="none")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps
    axis.grid(alpha=0.3)


def bars(axis, names: Sequence[str], series: dict[str, Sequence[tuple[float, float | None] | None]]) -> None:
    """Horizontal bars, one group per name (top to bottom) and one bar per series, each (value, error) or None: a
    value that is not defined gets no bar (not a bar at 0)."""
    height = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        offset = (i - (len(series) - 1) / 2) * height
        found = [(j + offset, value) for j, value in enumerate(values) if value is not None]
        axis.barh(
            [p for p, _ in found],
            [v[0] for _, v in found],
            height=height * 0.95,
            xerr=[v[1] or 0.0 for _, v in found],
            capsize=2,
            label=label,
            alpha=0.85,
        )
    axis.set_yticks(range(len(names)), [short(n) for n in names])
    axis.invert_yaxis()
    axis.grid(axis="x", alpha=0.3)


def histogram(axis, values: dict[str, Sequence[float]], bins: Sequence[float], threshold: float | None = None) -> None:
    """One filled step histogram per series over the same bins (counted with numpy: a build's hundred thousand
    scores cost no more than ten), and the threshold as a dashed line. Values outside the bins are not counted."""
    import numpy as np

    for label, series in values.items():
        counts, edges = np.histogram(np.asarray(series, dtype=float), bins=np.asarray(bins, dtype=float))
        axis.stairs(counts, edges, fill=True, alpha=0.6, label=label)
    if threshold is not None:
        axis.axvline(threshold, color="black", linestyle="--", label=f"tau = {threshold:g}")
    axis.set_ylabel("count")
    axis.grid(alpha=0.3)


def scatter(axis, xs: Sequence[float], ys: Sequence[float], label: str, limit: int | None = None, **style: Any) -> None:
    """Points (x, y); over `limit` points an even sample of them, said in the label: more only blur the picture, and
    matplotlib's memory grows with them."""
    step = -(-len(xs) // limit) if limit and len(xs) > limit else 1
    axis.scatter(xs[::step], ys[::step], label=label if step == 1 else f"{label} (1 in {step})", **style)


def legend_above(axis, labels: Sequence[str]) -> None:
    """The legend in rows above the plot, not beside it: a legend beside it widens the picture, which the page then
    scales down (to half a 1200px page, or a phone's width), and every label with it."""
    longest = max(len(label) for label in labels)
    columns = max(1, min(len(labels), 4, round(560 / (40 + 6 * longest))))
    axis.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.01), ncol=columns, frameon=False)


def short(label: str, width: int = 48) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"
