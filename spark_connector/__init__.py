"""mtawindows.spark_connector: PySpark data source for mtawindows (issue 5)."""
