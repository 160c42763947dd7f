# syntax=docker/dockerfile:1
#
# anteroom's container image: a release build on Debian bookworm, run as an unprivileged user
# with all its state (the embedded store, the signing keys) in one volume.
#
#   docker build -t anteroom .
#   docker run -p 8080:8080 -v anteroom-data:/var/lib/anteroom --stop-timeout 30 \
#     -v "$PWD/anteroom.toml:/etc/anteroom/anteroom.toml:ro" anteroom
#
# On SIGTERM the node drains requests in flight for up to 10 s: `--stop-timeout 30` gives it
# that time (Docker's default is 10 s, then SIGKILL).
#
# The config is mounted, never baked in: it holds key hashes and the site's address. It must
# listen on 0.0.0.0:8080 (and admin_listen on 0.0.0.0:9090 for the admin listener to be
# reachable from outside the container); its relative paths (data/anteroom.redb, data/keys)
# resolve in the working directory, the volume.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
# The registry and target caches speed up rebuilds; the binary leaves the cache in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p anteroom \
    && install -m 0755 target/release/anteroom /usr/local/bin/anteroom

FROM debian:bookworm-slim
# ca-certificates: the system roots that https webhook receivers are checked against.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 anteroom \
    && useradd --system --uid 10001 --gid anteroom --home-dir /var/lib/anteroom \
       --shell /usr/sbin/nologin anteroom \
    && install -d -o anteroom -g anteroom -m 0700 /var/lib/anteroom \
    && install -d -m 0755 /etc/anteroom
COPY --from=build /usr/local/bin/anteroom /usr/local/bin/anteroom

# Numeric, so that an orchestrator's "must not run as root" check can see it without /etc/passwd.
USER 10001:10001
WORKDIR /var/lib/anteroom
VOLUME /var/lib/anteroom
# 8080: the public listener; 9090: the admin listener and /metrics.
EXPOSE 8080 9090
ENV ANTEROOM_LOG_FORMAT=json
# The binary probes itself: the runtime image needs no curl.
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 \
    CMD ["anteroom", "health", "--url", "http://127.0.0.1:8080/_anteroom/readyz"]
ENTRYPOINT ["anteroom"]
CMD ["serve", "--config", "/etc/anteroom/anteroom.toml"]
