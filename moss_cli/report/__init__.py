"""What the audit's and `moss diff`'s reports share: the HTML page and its plots (page.py, plots.py),
the metrics that compare two clips (metrics.py), and writing the report files (files.py)."""
