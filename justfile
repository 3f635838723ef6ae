# clusternet-rs tasks. `just --list` shows them all.

set shell := ["bash", "-euo", "pipefail", "-c"]

# What `just build` produces (the benches run it)
release_bin := env_var_or_default("CARGO_TARGET_DIR", justfile_directory() / "target") / "release/clusternet"

# Release build of the clusternet binary
build:
    cargo build --release

# The release archive for krew (dist/kubectl-clusternet_linux_amd64.tar.gz), its sha256 and the
# krew manifest dist/clusternet.yaml
dist: build
    bash tests/env/dist.sh target/release/clusternet dist

# The image, built here with buildah (no registry needed): a debootstrap'd Debian base, the release
# binary and the tests' helm; tags localhost/clusternet:VERSION, which the kustomize overlays run
image *ARGS:
    bash tests/env/image.sh {{ARGS}}

# The image as the Containerfile stands: public base images, clusternet and helm compiled inside
image-from-source *ARGS:
    bash tests/env/image.sh --from-source {{ARGS}}

# The whole test suite: unit tests plus integration tests against real control planes
test *ARGS:
    bash tests/env/test.sh {{ARGS}}

# Fault injection (tests/chaos.rs): every case, the long ones too, with 100 Subscriptions over 3
# children (CLUSTERNET_CHAOS_SUBSCRIPTIONS changes it); prints case -> converged in N s -> invariants
chaos:
    rm -f target/tmp/chaos-report.md
    CLUSTERNET_CHAOS_SUBSCRIPTIONS=${CLUSTERNET_CHAOS_SUBSCRIPTIONS:-100} bash tests/env/test.sh --only --test chaos -- --include-ignored
    @printf '| case | load | fault at | converged after the fault ended | invariants |\n|---|---|---|---|---|\n'
    @cat target/tmp/chaos-report.md

# Formatting and lints (warnings are errors)
lint:
    cargo fmt --check
    cargo clippy --all-targets -- -D warnings

# Regenerate crds/ from the Rust API types
crds:
    cargo run --quiet -- crds --out crds/

# Build (first time) or reuse the Kubernetes binaries: kube-apiserver, kcm, scheduler, kubectl, etcd, kwok, helm
k8s-bin:
    bash tests/env/k8s-bin.sh

# Start a parent and N children on loopback in DIR (kubeconfigs, bootstrap token, logs there)
env-up DIR N="2":
    bash tests/env/env-up.sh {{DIR}} {{N}}

# Stop everything env-up started in DIR
env-down DIR:
    bash tests/env/env-down.sh {{DIR}}

# The main job: a parent and 2 children with clusternet running on them
demo DIR="/tmp/clusternet-demo":
    bash tests/env/demo.sh {{DIR}}

# Stop the demo
demo-down DIR="/tmp/clusternet-demo":
    bash tests/env/demo-down.sh {{DIR}}

# Fuzz one target of fuzz/ (tunnel_frame, tunnel_session, shadow_request, strategic_merge,
# overrides, scheduler_divide, api_validation, plugin_urls) with libFuzzer for SECONDS, starting
# from fuzz/corpus/TARGET; findings land in fuzz/artifacts/TARGET. Needs a nightly toolchain and
# cargo-fuzz: `rustup toolchain install nightly` and `cargo install cargo-fuzz`. The same targets
# run bounded on stable in `cargo test --lib` (PROPTEST_CASES raises their case counts).
fuzz TARGET SECONDS="600":
    cargo +nightly fuzz run {{TARGET}} -- -max_total_time={{SECONDS}}

# Benchmarks of the release binary (CLUSTERNET_BIN: the harnesses start it); figures go to the
# README's Performance section. The environment's API servers run without the tests' Go heap
# limit (GOMEMLIMIT=600MiB), which at 10,000 objects made the parent's kube-apiserver spend most
# of its CPU in garbage collection
bench: build
    CLUSTERNET_BIN={{release_bin}} CLUSTERNET_ENV_APISERVER_MEMLIMIT=${CLUSTERNET_ENV_APISERVER_MEMLIMIT:-off} cargo bench

# clusternet-rs side by side with the Go original (issue #13): GO_CLUSTERNET_BIN=DIR holding Go
# Clusternet's clusternet-{scheduler,controller-manager,agent,hub} (README "Performance" says how
# to build them); scheduling, backlog, registration and end to end; prints the ratio table
bench-peer: build
    BENCH_PEER=1 CLUSTERNET_BIN={{release_bin}} CLUSTERNET_ENV_APISERVER_MEMLIMIT=${CLUSTERNET_ENV_APISERVER_MEMLIMIT:-off} cargo bench --bench peer
