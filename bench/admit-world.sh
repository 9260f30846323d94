# Sourced by bench/admit.sh and bench/admit_nginx.sh: a `warrant serve` on a
# temp data dir, alice (a person with a PA) and one agent of hers whose key
# the CA generated, the trust bundle, a one-rule file, and `warrant admit`
# with DA verification on, ready. Needs W (the warrant binary), tmp (a
# temp dir) and pids (an array the caller's cleanup kills); sets ca, admit
# (base URLs) and admit_pid, and writes $tmp/{alice,agent}.{pem,key},
# $tmp/trust.pem and $tmp/rules.txt.

wait_line() { # FILE PREFIX → the rest of the first line starting with PREFIX
  for _ in $(seq 1 300); do
    v="$(sed -n "s|^$2||p" "$1" | head -n1)"
    [ -n "$v" ] && { echo "$v"; return; }
    sleep 0.1
  done
  echo "no '$2' in $1" >&2; exit 1
}
field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

admit_world() {
  local pw token
  pw="admit bench $(date +%s%N)"
  WARRANT_ADMIN_PASSWORD="$pw" WARRANT_LISTEN=127.0.0.1:0 WARRANT_LOG_LEVEL=warn \
    "$W" serve --data-dir "$tmp/data" >"$tmp/serve.out" 2>"$tmp/serve.log" &
  pids+=($!)
  ca="$(wait_line "$tmp/serve.out" 'listening on ')"
  token="$(curl -sf "$ca/api/v1/users/login" -H 'Content-Type: application/json' \
    -d "{\"username\":\"admin\",\"password\":\"$pw\"}" | field token)"
  curl -sf "$ca/api/v1/certs" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d '{"cn":"alice","principal_authorization":{"grants":[{"scheme_id":"db","capability_id":"read"}],"delegation_policy":{"allowed_mode":0,"max_agents":3}}}' \
    >"$tmp/alice.json"
  field cert_pem <"$tmp/alice.json" >"$tmp/alice.pem"
  field key_pem <"$tmp/alice.json" >"$tmp/alice.key"
  "$W" delegate --principal-key "$tmp/alice.key" --principal-cert "$tmp/alice.pem" \
    --principal-uid "$(field principal_uid <"$tmp/alice.json")" \
    --agent-id bench-bot --subject "/OU=gateway:reader/CN=bench-bot" \
    --capability db:read --lifetime 1800 >"$tmp/agent-request.json"
  # No CSR in the request: the CA generates the agent's key and returns it.
  curl -sf "$ca/api/v1/certs" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d @"$tmp/agent-request.json" >"$tmp/agent.json"
  field cert_pem <"$tmp/agent.json" >"$tmp/agent.pem"
  field key_pem <"$tmp/agent.json" >"$tmp/agent.key"
  { curl -sf "$ca/api/v1/ca/people"; curl -sf "$ca/api/v1/ca/root"; } >"$tmp/trust.pem"
  printf 'GET /v1/rows/* db:read\n' >"$tmp/rules.txt"

  "$W" admit --listen 127.0.0.1:0 --trust "$tmp/trust.pem" --rules "$tmp/rules.txt" \
    --crl-url "$ca/api/v1/crl/people" --principals "$tmp/alice.pem" >"$tmp/admit.out" 2>"$tmp/admit.log" &
  admit_pid=$!
  pids+=("$admit_pid")
  admit="$(wait_line "$tmp/admit.out" 'admit: listening on ')"
  for _ in $(seq 1 100); do curl -sf "$admit/readyz" >/dev/null && return; sleep 0.1; done
  echo "admit is not ready: $(tail -5 "$tmp/admit.log")" >&2; exit 1
}
