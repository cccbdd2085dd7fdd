#!/usr/bin/env bash
# Builds the container image from the repository's Dockerfile and smoke-tests it.
#
#   scripts/image.sh build    build $IMAGE (default snowsource:<version in pyproject.toml>)
#   scripts/image.sh smoke    build, then run tests/image against it (emulator + local Kafka)
#   scripts/image.sh engine   print the engine that would be used: docker, podman or buildah
#   scripts/image.sh tools    make sure some route can build here: exit 0 when a Docker or Podman
#                             engine works or buildah, podman and debootstrap are installed (as
#                             root, apt-get installs the missing ones); exit 3 when they cannot be
#   scripts/image.sh clean    remove $IMAGE, the stand-in base image and dangling layers
#
# Environment:
#   IMAGE          the tag to build and test
#   IMAGE_ENGINE   docker | podman | buildah: skip the probe
#   IMAGE_CACHE    where the base root filesystem tarball is kept (~/.cache/snowsource/image)
#   DEBIAN_MIRROR  Debian archive for debootstrap (default: the one apt is configured with)
#   KAFKA_PORT     the local broker the smoke test uses (scripts/kafka.sh)
#
# Routes. A Docker or Podman engine that can run a container builds and runs the image as usual.
# Without one (no daemon, or `podman run` refused by cgroups/rlimits) and without a registry, the
# Dockerfile's base image is stood in for: debootstrap makes a minimal Debian bookworm with its own
# python3 (3.11, as in python:3.11-slim), `podman import` tags it as the base image's name, and
# `buildah bud --isolation chroot --pull-never` builds the unchanged Dockerfile; the smoke test
# then runs the image with `buildah run --isolation chroot` (host network, no cgroups needed).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE_CACHE="${IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/snowsource/image}"
# Bumped whenever the stand-in base changes, so an old tarball or import is never reused.
BASE_RECIPE="debootstrap-bookworm-r1"
BASE_PACKAGES="python3,python3-venv,python-is-python3,ca-certificates"
RECIPE_LABEL="org.snowsource.base.recipe"

log() { printf 'image.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

version() { sed -n 's/^version = "\(.*\)"$/\1/p' "$here/pyproject.toml" | head -n 1; }
IMAGE="${IMAGE:-snowsource:$(version)}"

# The Dockerfile's base image, e.g. docker.io/library/python:3.11-slim.
base_python() { sed -n 's/^ARG PYTHON_VERSION=\(.*\)$/\1/p' "$here/Dockerfile" | head -n 1; }
base_image() {
  grep -q '^FROM python:${PYTHON_VERSION}-slim' "$here/Dockerfile" \
    || die "the Dockerfile's base is no longer python:\${PYTHON_VERSION}-slim; update base_image() here"
  echo "docker.io/library/python:$(base_python)-slim"
}

have() { command -v "$1" >/dev/null 2>&1; }

# ------------------------------------------------------------------------------------- engines

docker_works() {
  have docker && timeout 30 docker info >/dev/null 2>&1 \
    && timeout 300 docker run --rm "$(base_image)" python3 -c pass >/dev/null 2>&1
}

podman_works() {
  have podman && timeout 30 podman info >/dev/null 2>&1 || return 1
  ensure_base >&2 || return 1
  timeout 60 podman run --rm --pull=never --network host "$(base_image)" python3 -c pass \
    >/dev/null 2>&1
}

ENGINE=""
# Sets ENGINE once per invocation: the probes start containers, so they are not repeated.
choose_engine() {
  [[ -n "$ENGINE" ]] && return
  if [[ -n "${IMAGE_ENGINE:-}" ]]; then
    case "$IMAGE_ENGINE" in
      docker | podman | buildah) ENGINE="$IMAGE_ENGINE" ;;
      *) die "IMAGE_ENGINE=$IMAGE_ENGINE: expected docker, podman or buildah" ;;
    esac
  elif docker_works; then
    ENGINE=docker
  elif podman_works; then
    ENGINE=podman
  elif have buildah; then
    ENGINE=buildah
  else
    die "no container engine works here and buildah is not installed: run 'scripts/image.sh tools' as root, or apt-get install buildah podman debootstrap"
  fi
}

tools() {
  if docker_works; then log "a Docker engine works: no other tools needed"; return 0; fi
  local missing=()
  for tool in buildah podman debootstrap; do have "$tool" || missing+=("$tool"); done
  if ((${#missing[@]} == 0)); then return 0; fi
  if [[ "$(id -u)" != 0 ]] || ! have apt-get; then
    log "cannot install ${missing[*]}: needs root and apt-get (apt-get install buildah podman debootstrap)"
    return 3
  fi
  log "installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q buildah podman debootstrap >&2; then
    apt-get update -q >&2 && apt-get install -y -q buildah podman debootstrap >&2 || {
      log "apt-get could not install buildah podman debootstrap"
      return 3
    }
  fi
}

# ---------------------------------------------------------------------------- stand-in base

# The archive apt uses for bookworm (deb822 .sources or one-line .list), so debootstrap fetches
# from wherever this machine is allowed to.
debian_mirror() {
  if [[ -n "${DEBIAN_MIRROR:-}" ]]; then echo "$DEBIAN_MIRROR"; return; fi
  local found
  found="$(
    {
      awk '/^deb / && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list \
        /etc/apt/sources.list.d/*.list 2>/dev/null || true
      awk 'BEGIN { RS = ""; FS = "\n" }
        {
          uris = ""; suite = 0
          for (i = 1; i <= NF; i++) {
            if ($i ~ /^URIs:/) { uris = $i; sub(/^URIs:[ \t]*/, "", uris); sub(/[ \t].*/, "", uris) }
            if ($i ~ /^Suites:/ && $i ~ /[ \t]bookworm([ \t]|$)/) suite = 1
          }
          if (suite && uris != "") { print uris; exit }
        }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
    } | head -n 1
  )"
  echo "${found:-http://deb.debian.org/debian}"
}

unmount_below() {
  local dir="$1" target
  # Deepest first; debootstrap leaves /proc and /sys mounted when it fails half-way.
  while read -r target; do umount -l "$target" 2>/dev/null || true; done < <(
    awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r
  )
}

rootfs_tarball() {
  local tarball="$IMAGE_CACHE/$BASE_RECIPE.tar"
  if [[ -f "$tarball" ]]; then echo "$tarball"; return; fi
  have debootstrap || die "debootstrap is not installed: apt-get install debootstrap (or scripts/image.sh tools)"
  [[ "$(id -u)" == 0 ]] || die "debootstrap needs root to build the base root filesystem"
  [[ "$(base_python)" == 3.11 ]] \
    || die "the stand-in base is Debian bookworm's Python 3.11, but the Dockerfile asks for Python $(base_python); use a Docker or Podman engine that can pull $(base_image)"
  mkdir -p "$IMAGE_CACHE"
  local mirror root
  mirror="$(debian_mirror)"
  root="$(mktemp -d "$IMAGE_CACHE/rootfs.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: the trap must clean this very directory
  trap "unmount_below '$root'; rm -rf --one-file-system '$root'" EXIT
  log "debootstrap: Debian bookworm minbase + $BASE_PACKAGES from $mirror (once, about a minute)"
  debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$root/fs" "$mirror" \
    >"$root/debootstrap.log" 2>&1 || {
    tail -n 20 "$root/debootstrap.log" >&2
    die "debootstrap failed (mirror $mirror; set DEBIAN_MIRROR to use another)"
  }
  slim "$root/fs"
  tar --numeric-owner -C "$root/fs" -cf "$tarball.partial" .
  mv "$tarball.partial" "$tarball"
  unmount_below "$root"
  rm -rf --one-file-system "$root"
  trap - EXIT
  log "cached $tarball ($(du -h "$tarball" | cut -f1))"
  echo "$tarball"
}

# What Debian's slim images leave out (docs, man pages, translations, apt's caches), and the dpkg
# rules that keep it out of later installs too; the copyright files stay.
slim() {
  local fs="$1"
  cat >"$fs/etc/dpkg/dpkg.cfg.d/slim" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
DPKG
  find "$fs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$fs/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$fs/usr/share/man/"* "$fs/usr/share/info/"* "$fs/usr/share/locale/"*
  rm -rf "$fs/var/cache/apt/"*.bin "$fs/var/cache/apt/archives/"*.deb "$fs/var/lib/apt/lists/"*
  # The engine provides /dev at run time.
  rm -rf "$fs/dev/"*
}

# Makes the Dockerfile's base image available in the local containers-storage (podman and
# buildah share it): the real one when present or pullable, else the debootstrap stand-in.
ensure_base() {
  local base recipe
  base="$(base_image)"
  if podman image exists "$base" 2>/dev/null; then
    recipe="$(podman image inspect --format "{{index .Labels \"$RECIPE_LABEL\"}}" "$base")"
    if [[ -z "$recipe" || "$recipe" == "<no value>" || "$recipe" == "$BASE_RECIPE" ]]; then
      return 0
    fi
    log "stand-in $base is from recipe $recipe; importing $BASE_RECIPE"
  elif timeout 120 podman pull -q "$base" >/dev/null 2>&1; then
    log "pulled $base"
    return 0
  fi
  local tarball
  tarball="$(rootfs_tarball)"
  log "importing $tarball as $base (a stand-in: $base cannot be pulled here)"
  # The config python:3.11-slim has, so the Dockerfile sees the same environment.
  podman import --quiet \
    --change 'ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV=LANG=C.UTF-8' \
    --change 'CMD=["python3"]' \
    --change "LABEL=$RECIPE_LABEL=$BASE_RECIPE" \
    "$tarball" "$base" >/dev/null
}

# ------------------------------------------------------------------------------------- build

# The CA bundle the host's pip trusts (a TLS-inspecting proxy's CA lives there): handed to the
# build's pip steps as a secret, never stored in a layer.
pip_ca() {
  local candidate
  for candidate in "${PIP_CERT:-}" \
    "$(python3 -m pip config get global.cert 2>/dev/null || true)" \
    "${REQUESTS_CA_BUNDLE:-}" "${SSL_CERT_FILE:-}"; do
    if [[ -n "$candidate" && -s "$candidate" ]]; then echo "$candidate"; return; fi
  done
}

# The project's published repository (pyproject.toml, [project.urls] Source), not this clone's
# origin: a fork or a mirror with credentials in its URL must not end up in the label.
source_url() {
  awk '/^\[/ { urls = ($0 == "[project.urls]") } urls && /^Source *=/ {
    sub(/^Source *= *"/, ""); sub(/".*$/, ""); print; exit }' "$here/pyproject.toml"
}

build() {
  local ca
  choose_engine
  ca="$(pip_ca)"
  local revision source
  revision="$(git -C "$here" rev-parse HEAD 2>/dev/null || true)"
  source="$(source_url)"
  # Also as --label: buildah's layer cache ignores build-arg values in LABEL, and would keep the
  # previous commit's revision.
  local args=(--build-arg "REVISION=$revision" --build-arg "SOURCE_URL=$source"
    --label "org.opencontainers.image.revision=$revision"
    --label "org.opencontainers.image.source=$source" -t "$IMAGE")
  [[ -n "$ca" ]] && args+=(--secret "id=pip_cert,src=$ca")
  remember_previous
  log "building $IMAGE with $ENGINE${ca:+ (pip trusts $ca for the build only)}"
  case "$ENGINE" in
    docker) DOCKER_BUILDKIT=1 docker build "${args[@]}" "$here" ;;
    podman)
      ensure_base
      podman build --format docker --layers --pull=never "${args[@]}" "$here"
      ;;
    buildah)
      have podman || die "podman is needed to import the stand-in base image (apt-get install podman)"
      ensure_base
      buildah bud --isolation chroot --pull-never --layers --format docker "${args[@]}" "$here"
      ;;
  esac
  log "built $IMAGE: $(size)"
  drop_previous
}

PREVIOUS=""
# Each rebuild leaves the image the tag pointed to before; removed unless something still uses
# it, so repeated CI runs do not fill the disk (the layer cache stays).
remember_previous() {
  [[ "$ENGINE" == docker ]] && return
  PREVIOUS="$(buildah images --quiet --no-trunc "$IMAGE" 2>/dev/null | head -n 1 || true)"
}
drop_previous() {
  [[ -n "$PREVIOUS" ]] || return 0
  local current
  current="$(buildah images --quiet --no-trunc "$IMAGE" 2>/dev/null | head -n 1 || true)"
  if [[ "$current" != "$PREVIOUS" ]]; then buildah rmi "$PREVIOUS" >/dev/null 2>&1 || true; fi
}

size() {
  case "$ENGINE" in
    docker) docker image ls --format '{{.Size}}' "$IMAGE" | head -n 1 ;;
    *) buildah images --format '{{.Size}}' "$IMAGE" 2>/dev/null | head -n 1 ;;
  esac
}

smoke() {
  build
  [[ -x "$here/.venv/bin/pytest" ]] || make -C "$here" install
  log "smoke test of $IMAGE ($ENGINE), Kafka on 127.0.0.1:${KAFKA_PORT:-9092}"
  cd "$here"
  SNOWSOURCE_IMAGE="$IMAGE" SNOWSOURCE_IMAGE_ENGINE="$ENGINE" \
    SNOWSOURCE_IMAGE_HOST_CA="$(pip_ca)" \
    .venv/bin/pytest -q -p no:cacheprovider -rA tests/image
}

clean() {
  choose_engine
  if [[ "$ENGINE" == docker ]]; then
    docker image rm "$IMAGE" >/dev/null 2>&1 || true
    return
  fi
  buildah rmi "$IMAGE" >/dev/null 2>&1 || true
  local base
  base="$(base_image)"
  if [[ "$(podman image inspect --format "{{index .Labels \"$RECIPE_LABEL\"}}" "$base" 2>/dev/null)" == debootstrap-* ]]; then
    buildah rmi "$base" >/dev/null 2>&1 || true
  fi
  buildah rmi --prune >/dev/null 2>&1 || true
  log "removed $IMAGE and the stand-in base; the tarball stays in $IMAGE_CACHE"
}

case "${1:-}" in
  build) build ;;
  smoke) smoke ;;
  engine) choose_engine; echo "$ENGINE" ;;
  tools) tools ;;
  clean) clean ;;
  *) echo "usage: $0 build|smoke|engine|tools|clean" >&2; exit 2 ;;
esac
