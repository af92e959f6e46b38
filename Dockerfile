# mtawindows server image: `docker compose up` builds it (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY server ./server
COPY client ./client
COPY spark_connector ./spark_connector
COPY cli ./cli
COPY testing ./testing
RUN pip install . && pip install grpcio-health-checking \
    && useradd --system --uid 10001 mtaw && mkdir -p /data && chown mtaw /data

USER mtaw
VOLUME ["/data"]
EXPOSE 50051 9102

# Health: the standard gRPC health service, probed with the SDK's dependencies.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import grpc,sys; from grpc_health.v1 import health_pb2 as h, health_pb2_grpc as g; s=g.HealthStub(grpc.insecure_channel('127.0.0.1:50051')).Check(h.HealthCheckRequest(), timeout=3); sys.exit(0 if s.status == 1 else 1)"]

ENTRYPOINT ["mtawindows", "serve"]
CMD ["--host", "0.0.0.0", "--port", "50051", "--data-dir", "/data", "--metrics-host", "0.0.0.0", "--metrics-port", "9102"]
