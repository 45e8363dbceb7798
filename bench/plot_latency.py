#!/usr/bin/python3
"""Plots append latency against load for walserver and direct librdkafka from walbench's CSV.

Usage: bench/plot_latency.py walbench.csv latency.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(csv_path, png_path):
    rows = [r for r in csv.DictReader(open(csv_path)) if r["mode"] == "latency"]
    fig, ax = plt.subplots(figsize=(8, 5))
    for system, colour in (("service", "tab:blue"), ("direct", "tab:orange")):
        points = sorted((float(r["entries_per_s"]), float(r["p50_ms"]), float(r["p99_ms"]))
                        for r in rows if r["system"] == system)
        if not points:
            continue
        rate = [p[0] for p in points]
        ax.plot(rate, [p[1] for p in points], "o--", color=colour, label=f"{system} p50")
        ax.plot(rate, [p[2] for p in points], "s-", color=colour, label=f"{system} p99")
    ax.set_xlabel("offered load, single-entry appends per second (open loop)")
    ax.set_ylabel("latency, ms (log scale)")
    ax.set_title("Append latency against load: walserver vs direct librdkafka")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
