# syntax=docker/dockerfile:1
# Multi-stage build of the one `bosun` binary; runs as a non-root user.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# Build dependencies first so source edits do not rebuild them.
COPY Cargo.toml Cargo.lock ./
COPY contracts/Cargo.toml contracts/Cargo.toml
COPY sagas/Cargo.toml sagas/Cargo.toml
COPY consumers/Cargo.toml consumers/Cargo.toml
RUN mkdir -p src contracts/src sagas/src consumers/src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs contracts/src/lib.rs sagas/src/lib.rs consumers/src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src contracts/src sagas/src consumers/src
COPY . .
RUN touch src/main.rs src/lib.rs contracts/src/lib.rs sagas/src/lib.rs consumers/src/lib.rs \
    && cargo build --release --locked --bin bosun

FROM debian:bookworm-slim
# git: the local Git host; ca-certificates and libssl3: HTTPS to Azure.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates libssl3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 bosun \
    && useradd --system --uid 10001 --gid bosun --home-dir /var/lib/bosun --create-home bosun
COPY --from=build /src/target/release/bosun /usr/local/bin/bosun
USER 10001:10001
WORKDIR /var/lib/bosun
ENV BOSUN_DATA_DIR=/var/lib/bosun/data \
    BOSUN_LOG_FORMAT=json
ENTRYPOINT ["/usr/local/bin/bosun"]
CMD ["serve"]
