"""Impression logs: schema and validation, Parquet/CSV IO, manifests, generator, importers, report."""
