# gatehouse, built in one stage and run in a small one, as a non-root user.
#
# The dependency build is its own layer: the manifests and the lock file are copied
# first, with empty crate sources, so a change to gatehouse's code rebuilds only
# gatehouse, not the hundreds of crates under it.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY gateway/Cargo.toml gateway/Cargo.toml
COPY layers/Cargo.toml layers/Cargo.toml
COPY config/Cargo.toml config/Cargo.toml
COPY examples/layers-app/Cargo.toml examples/layers-app/Cargo.toml
RUN mkdir -p gateway/src layers/src config/src examples/layers-app/src \
    && echo 'fn main() {}' > gateway/src/main.rs \
    && touch gateway/src/lib.rs layers/src/lib.rs config/src/lib.rs examples/layers-app/src/lib.rs \
    && cargo build --release --locked --bin gatehouse \
    && rm -rf gateway/src layers/src config/src
COPY gateway/src gateway/src
COPY layers/src layers/src
COPY config/src config/src
# The stub sources' build outputs are older than the real files: touch to be sure.
RUN touch gateway/src/main.rs gateway/src/lib.rs layers/src/lib.rs config/src/lib.rs \
    && cargo build --release --locked --bin gatehouse

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --no-create-home gatehouse
COPY --from=build /src/target/release/gatehouse /usr/local/bin/gatehouse
COPY examples/site /srv/site
USER 10001:10001
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/gatehouse"]
CMD ["--root", "/srv/site", "--listen", "0.0.0.0:8080", "--admin-listen", "0.0.0.0:9090"]
