# Build: a full Rust toolchain; run: a slim Debian with only the binary.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY migrations migrations
COPY openapi openapi
COPY assets assets
COPY benches benches
# A workspace member (the test proxy): cargo reads every member's manifest.
COPY crates crates
# The patched tokio-postgres ([patch.crates-io] in Cargo.toml, vendor/README.md).
COPY vendor vendor
RUN cargo build --release --locked --bin featurepipe

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home featurepipe
COPY --from=build /src/target/release/featurepipe /usr/local/bin/featurepipe
USER featurepipe
ENV FEATUREPIPE_LISTEN=0.0.0.0:8080
EXPOSE 8080
# The health check asks the address the service listens on, FEATUREPIPE_LISTEN
# (a deployment may set another port), on loopback when that is a wildcard.
HEALTHCHECK --interval=10s --timeout=3s CMD host=${FEATUREPIPE_LISTEN%:*}; \
    case "$host" in 0.0.0.0|"[::]") host=127.0.0.1 ;; esac; \
    curl -fsSg "http://$host:${FEATUREPIPE_LISTEN##*:}/healthz" || exit 1
ENTRYPOINT ["featurepipe"]
CMD ["serve"]
