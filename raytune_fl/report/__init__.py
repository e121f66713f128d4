"""The report layer: reads the MLflow store (and its Parquet artifacts) and draws tables and dashboards."""
