#!/usr/bin/python3
"""Draws walserver beside the paths it replaces, one panel per workload: the chart at the top of
docs/BENCHMARKS.md.

Usage: bench/plot_paths.py paths.png walpeer.csv [walbench.csv]

walpeer's CSV gives the median of its rounds per mode and path (walserver, rskafka direct,
rskafka behind the merging worker), as walpeer's own table does. walbench's CSV (recognised by
its `system` column) adds direct librdkafka from C++ for the write batch and single entries; its
own walserver figures are left out, since they come from another run and another client.
"""
import csv
import sys
from decimal import ROUND_HALF_UP, Decimal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# walpeer mode -> panel title, and what its CPU is per.
PANELS = [
    ("regions", "write batch: 8 callers x 32 of 1,000 regions\nentries/s", "s/GB"),
    ("single", "single: 64 callers x 1 entry\nentries/s", "s/GB"),
    ("batched", "batched: 4 callers x 64 entries of one region\nentries/s", "s/GB"),
    ("replay", "replay of one region (64 MiB)\nMiB/s", "s/GB read"),
]
# walbench (mode, system) -> the walpeer mode it stands beside.
WALBENCH_DIRECT = {("regions", "direct"): "regions", ("single", "direct produce"): "single"}
DIRECT_LIBRDKAFKA = "librdkafka (C++)"
COLOURS = {
    "walserver": "tab:blue",
    "rskafka": "tab:orange",
    "rskafka+worker": "tab:green",
    DIRECT_LIBRDKAFKA: "tab:grey",
}


def base_path(path):
    """`rskafka+worker (TCP_NODELAY)` -> `rskafka+worker`: one colour per kind of path."""
    return path.split(" (")[0]


def median(values):
    """walpeer's median: the middle of the sorted values, the upper one of an even count."""
    return sorted(values)[len(values) // 2]


def read(files):
    """{mode: {path: (value, cpu_s_per_gb)}}, and the payload and compression of the runs."""
    figures = {}
    runs = set()
    for name in files:
        rows = list(csv.DictReader(open(name)))
        if rows and "system" in rows[0]:  # walbench
            for r in rows:
                mode = WALBENCH_DIRECT.get((r["mode"], r["system"]))
                if mode:
                    figures.setdefault(mode, {})[DIRECT_LIBRDKAFKA] = (
                        float(r["entries_per_s"]), float(r["cpu_s_per_gb"]))
            continue
        rounds = {}
        for r in rows:
            if r["mode"] in [mode for mode, _, _ in PANELS]:
                runs.add((r["payload"], r["compression"]))
                rounds.setdefault((r["mode"], r["path"]), []).append(
                    (float(r["value"]), float(r["cpu_s_per_gb"])))
        for (mode, path), values in rounds.items():
            figures.setdefault(mode, {})[path] = (median([v for v, _ in values]),
                                                  median([c for _, c in values]))
    if len(runs) > 1:
        sys.exit(f"plot_paths.py: runs of different entries or compression: {sorted(runs)}")
    return figures, (runs.pop() if runs else ("random", "none"))


def whole(value):
    """Rounded as walpeer prints it (the CSV keeps one decimal)."""
    return f"{int(Decimal(str(value)).quantize(Decimal(1), ROUND_HALF_UP)):,}"


def main(png_path, files):
    figures, (payload, compression) = read(files)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(16, 4.8))
    for ax, (mode, title, cpu_unit) in zip(axes, PANELS):
        paths = sorted(figures.get(mode, {}).items(),
                       key=lambda item: (base_path(item[0]) != "walserver", item[0]))
        labels = [p.replace(" (", "\n(") for p, _ in paths]
        values = [v for _, (v, _) in paths]
        bars = ax.bar(range(len(paths)), values,
                      color=[COLOURS.get(p, COLOURS.get(base_path(p), "tab:purple"))
                             for p, _ in paths])
        for bar, (_, (value, cpu)) in zip(bars, paths):
            text = whole(value) + (f"\n{cpu:.1f} {cpu_unit}" if cpu else "")
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(paths)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.margins(y=0.2)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"walserver beside the paths it replaces: 1 KiB {payload} entries, compression "
                 f"{compression}; CPU in seconds per GB of the path's processes, without the "
                 "broker", fontsize=10)
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
