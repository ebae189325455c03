#!/usr/bin/env bash
# Regenerates the image's hashed locks from pyproject.toml: requirements/image.txt (the runtime
# dependencies, every file's sha256 for Python 3.11 on any platform) and requirements/build.txt (what
# builds the project's own wheel). The Dockerfile installs them with --require-hashes, so an image
# build fetches exactly these files or fails. Dependabot proposes updates to both; run this after
# changing [project.dependencies] or [build-system] and commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."

tool="$(mktemp -d)"
trap 'rm -rf "$tool"' EXIT
python3 -m venv "$tool"
"$tool/bin/pip" install --quiet "uv>=0.5"

compile() {
  "$tool/bin/uv" pip compile --quiet --universal --python-version 3.11 --generate-hashes \
    --custom-compile-command "scripts/lock.sh" "$@"
}
compile pyproject.toml -o requirements/image.txt
python3 - <<'PY' | compile - -o requirements/build.txt
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))
PY
echo "lock: requirements/image.txt, requirements/build.txt"
