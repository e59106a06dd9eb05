"""The run index: one Parquet row per kept run, Hive-partitioned by day, beside the run files.

Listing runs from their headers costs one read per run: minutes for the millions of runs a
fleet keeps. The index holds what the listing shows (and the hosts and models each run
called) in columns any Parquet engine reads: ``<store>/_index/date=YYYY-MM-DD/*.parquet``.

Where things are: ``rows`` (the row format and file names), ``batch`` (a recorder's rows
waiting to be written), ``pending`` (runs in flight, not indexed yet), ``listing`` (which
files a reader reads), ``reader`` (DuckDB), ``fetch`` (only the parts of remote files a
listing needs), ``tag_filters`` (footer filters by tag), ``compaction`` (a day's files
merged), ``claims`` and ``manifests`` (one rewrite of a day at a time, with or without
conditional creates), ``rebuild`` (the index written again from the run files).
"""
