# The Spark image of docker-compose.yml: the Spark master, the worker and the demo job all run
# it, so the driver and the executors have the same Spark and the same Python, and the worker's
# Python tasks (the connector's data source) find mtawindows installed.
#
# Spark comes from PyPI (pyspark bundles the jars and bin/spark-class) at SPARK_VERSION, the
# version the connector is tested with: it needs the Python streaming data source's admission
# control (pyspark.sql.streaming.datasource, Spark 4.2+) and Python 3.11+, which the
# apache/spark images (Ubuntu 22.04, Python 3.10) do not have.
FROM python:3.11-slim-trixie

ARG SPARK_VERSION=4.3.0

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-21-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY server ./server
COPY client ./client
COPY spark_connector ./spark_connector
COPY cli ./cli
COPY testing ./testing
RUN pip install ".[spark]" "pyspark==${SPARK_VERSION}" \
    && useradd --system --create-home --uid 10001 spark \
    && mkdir -p /out /tmp/spark-work /shared \
    && chown spark /out /tmp/spark-work /shared

USER spark
WORKDIR /home/spark
EXPOSE 7077 8080 8081
