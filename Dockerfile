# exposure-filter container image: a Debian bookworm builder compiles the
# server and the CLI; the runtime stage is bookworm-slim with only the shared
# libraries they load, running as uid 65532.
#
# Offline build (no registry reachable; see docs/deployment.md):
#   bash scripts/container-check.sh          # builds the base images if missing,
#                                            # builds this image, starts it, checks health
# or by hand:
#   podman build --isolation chroot --network host --format docker \
#     --build-arg BASE_IMAGE=localhost/debian:bookworm \
#     --build-arg RUNTIME_IMAGE=localhost/debian:bookworm-slim \
#     -t exposure-filter:dev .
ARG BASE_IMAGE=debian:bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS builder
# The build dependencies of scripts/setup.sh minus tests, benchmarks and
# Python (the image builds neither tests nor benchmarks).
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libabsl-dev libxxhash-dev libspdlog-dev libssl-dev prometheus-cpp-dev \
      librdkafka-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Release, only the two shipped binaries. EF_WERROR off: a warning from a
# newer toolchain must not break an image build (CI builds with -Werror).
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DEF_BUILD_TESTS=OFF -DEF_BUILD_BENCH=OFF -DEF_WERROR=OFF >/dev/null \
 && cmake --build /build --target exposure-filter-server exposure-filter-cli \
 && mkdir -p /out \
 && install -m 0755 -s /build/src/server/exposure-filter-server \
      /build/src/cli/exposure-filter-cli /out/

FROM ${RUNTIME_IMAGE}
# Only the runtime libraries (their -dev packages stay in the builder):
# gRPC C++ (pulls libgrpc29, re2, c-ares), protobuf, Abseil, xxHash, spdlog
# (pulls fmt), OpenSSL, prometheus-cpp (pulls civetweb), librdkafka (the
# optional Kafka consumer).
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libxxhash0 libspdlog1.10 \
      libssl3 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      librdkafka1 librdkafka++1 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && groupadd --system --gid 65532 exposure \
 && useradd --system --uid 65532 --gid 65532 --no-create-home \
      --home-dir /var/lib/exposure-filter --shell /usr/sbin/nologin exposure \
 && install -d -o 65532 -g 65532 -m 0750 /var/lib/exposure-filter
COPY --from=builder /out/ /usr/local/bin/

# Containers are reached from outside: listen on every interface, for gRPC
# and for the admin (Prometheus /metrics) port; see docs/deployment.md.
ENV EXPOSURE_FILTER_LISTEN=0.0.0.0:50051 \
    EXPOSURE_FILTER_ADMIN_LISTEN=0.0.0.0:9464
# 50051: gRPC (exposure.v1, health, reflection). 9464: admin/metrics.
EXPOSE 50051 9464
# Durable state (snapshots, write-ahead log) lives here; mount a volume.
VOLUME ["/var/lib/exposure-filter"]
WORKDIR /var/lib/exposure-filter
USER 65532:65532
# The standard grpc.health.v1 check through our CLI: exit 0 iff SERVING (the
# server turns NOT_SERVING as soon as it starts draining on SIGTERM).
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/exposure-filter-cli", "health", "--address=127.0.0.1:50051", "--deadline=3s"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/exposure-filter-server"]
