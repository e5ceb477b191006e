"""Prometheus metrics: what the processes record (`instruments`), what `/metrics` reads from
the database when scraped (`scrape`), who may scrape (`access`), and the folders the
processes share their samples through (`files`). docs/operations.md, "Metrics"."""
