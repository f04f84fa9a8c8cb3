#!/bin/sh
# Build a Debian bookworm base image without a registry: debootstrap a minbase root file system and
# `docker import` it as local/debian:bookworm (or $1). For machines where Docker Hub cannot be reached;
# elsewhere the Dockerfiles' default BASE_IMAGE (a public image) needs none of this.
# Needs root, debootstrap and a running Docker engine. The host's CA bundle is copied in, so that pip
# and apt inside builds trust an HTTPS proxy that re-signs traffic with a local authority.
set -eu
TAG="${1:-local/debian:bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ROOTFS="$(mktemp -d)"
trap 'rm -rf "$ROOTFS"' EXIT

debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" >/dev/null
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
cat >"$ROOTFS/etc/apt/sources.list" <<SOURCES
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
mkdir -p "$ROOTFS/etc/ssl/certs" "$ROOTFS/usr/local/share/ca-certificates"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
fi
for crt in /usr/local/share/ca-certificates/*.crt; do
    [ -f "$crt" ] && cp "$crt" "$ROOTFS/usr/local/share/ca-certificates/"
done
tar --numeric-owner -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["/bin/bash"]' \
    - "$TAG" >/dev/null
echo "$TAG"
