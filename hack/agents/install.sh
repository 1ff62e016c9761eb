#!/usr/bin/env bash
# Installs the real agent CLIs the integration tests run, from npm, into
#   ${SFORGE_AGENTS_CACHE:-/var/cache/sforge/agents}/<package>@<version>
# and skips each one already there. The versions are pinned: the profiles
# in launcher/agent were checked against these.
set -euo pipefail

CACHE=${SFORGE_AGENTS_CACHE:-/var/cache/sforge/agents}
PACKAGES=(
  "@anthropic-ai/claude-code@${SFORGE_CLAUDE_CODE_VERSION:-2.1.197}"
  "@openai/codex@${SFORGE_CODEX_VERSION:-0.171.0}"
  "@google/gemini-cli@${SFORGE_GEMINI_CLI_VERSION:-0.61.0}"
)

command -v npm >/dev/null || { echo "hack/agents/install.sh: npm is missing (make deps installs it)" >&2; exit 1; }
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock -w 1800 9 || { echo "hack/agents/install.sh: failed to take $CACHE/.lock within 30 min" >&2; exit 1; }
for pkg in "${PACKAGES[@]}"; do
  dir=$CACHE/${pkg//\//_}
  if [[ -f $dir/.done ]]; then echo "hack/agents/install.sh: $pkg up to date in $dir"; continue; fi
  rm -rf "$dir" && mkdir -p "$dir"
  start=$(date +%s)
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$pkg"
  touch "$dir/.done"
  echo "hack/agents/install.sh: installed $pkg in $(( $(date +%s) - start ))s into $dir"
done
