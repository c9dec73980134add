#!/usr/bin/env bash
# Installs the Debian 12 packages exposure-filter needs (as root, only those
# missing) and builds it with CMake + Ninja.
#   scripts/setup.sh [build-dir] [extra cmake args...]
# EF_BUILD_TARGETS (space-separated ninja targets) builds only those instead
# of everything: scripts/test.sh and scripts/fuzz.sh build just what they run.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libxxhash-dev libspdlog-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libhiredis-dev
  python3 python3-grpcio python3-protobuf python3-xxhash
  clang libclang-rt-14-dev  # scripts/fuzz.sh: libFuzzer + ASan/UBSan runtimes
  # TLS (OpenSSL checks the PEM files; openssl makes test certs).
  libssl-dev openssl
  # Kafka consumer + its mock cluster (tests), kcat (docs, tests).
  librdkafka-dev kcat
  # Go client (clients/go), built offline in GOPATH mode: the toolchain,
  # Debian's grpc-go and protobuf modules (golang/protobuf 1.5, which wraps
  # the protobuf API the generated code uses), and the code generators.
  golang-go golang-google-grpc-dev golang-google-protobuf-dev
  golang-github-golang-protobuf-1-5-dev protoc-gen-go protoc-gen-go-grpc
  # Java client (clients/java): the JDK, grpc-java and protobuf-java, the
  # grpc-java stub generator, JUnit 5's console launcher, and the jars
  # grpc-java loads at run time that libgrpc-java does not pull in (Netty
  # for the transport, Gson, PerfMark, javax.annotation for the stubs).
  default-jdk-headless libgrpc-java libprotobuf-java
  protobuf-compiler-grpc-java-plugin junit5
  libnetty-java libgoogle-gson-java libperfmark-java
  libgeronimo-annotation-1.3-spec-java
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: run as root (or install the packages above yourself)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build_dir=${1:-build}
shift || true
cmake -S . -B "$build_dir" -G Ninja "$@" >/dev/null
read -r -a targets <<<"${EF_BUILD_TARGETS:-}"
ninja -C "$build_dir" "${targets[@]}"
