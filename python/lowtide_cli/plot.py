"""The RSS-over-time PNG of `lowtide compare`."""

MiB = 1024 * 1024
COLORS = {"glibc": "#7f7f7f", "mimalloc": "#1f77b4", "jemalloc": "#2ca02c",
          "tcmalloc": "#ff7f0e", "lowtide": "#d62728"}


def available():
    """None if matplotlib can be used, else what to tell the user."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (Debian: apt-get install python3-matplotlib); no plot written"
    return None


def rss_plot(runs, title, path):
    """runs: [(allocator, [(seconds, rss bytes), ...])]; one line each.
    path: a file name or a binary file object, written as PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5))
    for name, samples in runs:
        if samples:
            ax.plot([t for t, _ in samples], [r / MiB for _, r in samples], label=name,
                    color=COLORS.get(name), linewidth=2 if name == "lowtide" else 1.3)
    ax.set_xlabel("time since start, s")
    ax.set_ylabel("RSS of the process tree, MiB")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
