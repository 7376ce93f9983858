#!/bin/sh
# Generates configure and Makefile.in; none of them is kept in git.
set -e
cd "$(dirname "$0")"
autoreconf --install --force --warnings=all
