# syntax=docker/dockerfile:1
# Multi-stage build of the one `bosun` binary on Debian 13 (trixie, the
# current stable). The runtime image runs as the non-root user 10001 under
# tini (signals reach bosun, zombies of the local adapters' child processes
# are reaped) and answers /healthz, /readyz and /metrics on the ops port
# (BOSUN_OPS_ADDR, 9090); `--http` adds the API on 8080.
#
# Two images, one binary:
#   docker build --target runtime -t bosun:TAG .      # every component
#   docker build --target iac     -t bosun-iac:TAG .  # iac-provisioning
# `iac` is `runtime` with the Pulumi CLI (pinned, its SHA-256 checked) for
# iac-provisioning with `azure` adapters; infra/kubernetes runs that
# consumer on the `bosun-iac` image and every other pod on `bosun`. The
# CLI runs Pulumi YAML programs as it is (the YAML language host is
# built in); a program in another language needs its runtime (Node.js,
# Python, .NET, Go) in an image built FROM this one. Resource plugins
# (azure-native …) are downloaded by the CLI on first use into PULUMI_HOME,
# under the data directory.

FROM rust:1.95-trixie AS build
WORKDIR /src
# Build dependencies first so source edits do not rebuild them. Every
# workspace member's manifest is needed for the workspace to load.
COPY Cargo.toml Cargo.lock ./
COPY contracts/Cargo.toml contracts/Cargo.toml
COPY sagas/Cargo.toml sagas/Cargo.toml
COPY consumers/Cargo.toml consumers/Cargo.toml
COPY testing/servicebus-broker/Cargo.toml testing/servicebus-broker/Cargo.toml
COPY testing/azure-doubles/Cargo.toml testing/azure-doubles/Cargo.toml
RUN mkdir -p src contracts/src sagas/src consumers/src testing/servicebus-broker/src testing/azure-doubles/src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs contracts/src/lib.rs sagas/src/lib.rs consumers/src/lib.rs testing/servicebus-broker/src/lib.rs \
       testing/azure-doubles/src/lib.rs \
    && cargo build --release --locked --bin bosun \
    && rm -rf src contracts/src sagas/src consumers/src testing/servicebus-broker/src testing/azure-doubles/src
COPY . .
RUN touch src/main.rs src/lib.rs contracts/src/lib.rs sagas/src/lib.rs consumers/src/lib.rs \
    && cargo build --release --locked --bin bosun

FROM debian:trixie-slim AS runtime
# git: the local Git host, and iac-provisioning's fetch of the Pulumi
# program; ca-certificates and libssl3t64: HTTPS to Azure;
# tini: the init process; procps: `kill` and `ps` for the local pipeline
# runner (bash and GNU tar are in the base image).
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates libssl3t64 tini procps \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 bosun \
    && useradd --system --uid 10001 --gid bosun --home-dir /var/lib/bosun --create-home bosun
COPY --from=build /src/target/release/bosun /usr/local/bin/bosun
USER 10001:10001
WORKDIR /var/lib/bosun
ENV BOSUN_DATA_DIR=/var/lib/bosun/data \
    BOSUN_LOG_FORMAT=json \
    BOSUN_OPS_ADDR=0.0.0.0:9090
# 9090: the ops port (probes, Prometheus); 8080: the API with `--http 0.0.0.0:8080`.
EXPOSE 9090 8080
# Liveness from the ops port, with bash's /dev/tcp (no curl in the image).
# Kubernetes ignores it and uses the probes in infra/kubernetes.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9090 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/bosun"]
CMD ["serve"]

# iac-provisioning's image: the runtime with the Pulumi CLI. Bump the
# version and its SHA-256 together, from the release's
# pulumi-<version>-checksums.txt; the build fails on a mismatch.
FROM debian:trixie-slim AS pulumi
ARG PULUMI_VERSION=3.132.0
ARG PULUMI_SHA256=107129c599230b3cb6624c085182099ab181f0c3f54223a34282b9703a5699fa
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && curl -fsSL -o /tmp/pulumi.tar.gz \
       "https://github.com/pulumi/pulumi/releases/download/v${PULUMI_VERSION}/pulumi-v${PULUMI_VERSION}-linux-x64.tar.gz" \
    && echo "${PULUMI_SHA256}  /tmp/pulumi.tar.gz" | sha256sum -c - \
    && mkdir /opt/pulumi \
    && tar -xzf /tmp/pulumi.tar.gz -C /opt/pulumi --strip-components=1 \
    && rm /tmp/pulumi.tar.gz \
    && /opt/pulumi/pulumi version

FROM runtime AS iac
COPY --from=pulumi /opt/pulumi/ /usr/local/bin/
# The root file system is read-only on AKS: Pulumi keeps its plugins and
# workspace under the data directory (an emptyDir), and never asks to
# update itself.
ENV PULUMI_HOME=/var/lib/bosun/data/pulumi-home \
    PULUMI_SKIP_UPDATE_CHECK=true

# The default target stays the runtime image.
FROM runtime
