#!/usr/bin/env bash
# The README's two commands, for a fresh Debian 12 machine as root:
#
#   tools/dev.sh run    install what is missing, build, start the suite's
#                       main job on local defaults (rally-master, and a real
#                       OpenArena server on loopback behind rally-relay, which
#                       heartbeats that master) and print what to try
#   tools/dev.sh test   install what is missing, build with -Werror and
#                       ASan+UBSan, check the formatting, run every test
#
# Packages come from Debian's archive only. Game servers never start as
# services: while apt-get runs, a policy-rc.d that exits 101 blocks service
# starts (removed afterwards if we created it).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
jobs=$(nproc 2>/dev/null || echo 2)

build_pkgs=(build-essential cmake pkg-config libmicrohttpd-dev libjson-c-dev libsodium-dev
	libssl-dev libcurl4-openssl-dev libminiupnpc-dev)
run_pkgs=(openarena-server qstat curl python3)
# The network lab (tests/lab): nftables NATs, stund as the STUN server,
# miniupnpd with its nftables backend as the UPnP router.
test_pkgs=(openarena-server qstat python3 iproute2 clang-format curl nftables stun-server
	miniupnpd miniupnpd-nftables)

say() { printf '\n== %s\n' "$*"; }
die() {
	echo "dev.sh: $*" >&2
	exit 1
}

install_missing() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ]; then
		echo "missing packages: ${missing[*]}; run as root (or apt-get install them)" >&2
		exit 1
	fi
	say "installing: ${missing[*]}"
	local made_policy=0
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		made_policy=1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	[ $made_policy -eq 1 ] && rm -f /usr/sbin/policy-rc.d
	return 0
}

build() {
	local dir=$1
	shift
	say "building in $dir"
	cmake -S "$top" -B "$dir" "$@" >/dev/null
	cmake --build "$dir" -j "$jobs"
}

cmd_test() {
	install_missing "${build_pkgs[@]}" "${test_pkgs[@]}"
	say "checking the formatting (clang-format)"
	local f unformatted=()
	while IFS= read -r f; do
		clang-format --dry-run --Werror "$top/$f" >/dev/null 2>&1 || unformatted+=("$f")
	done < <(cd "$top" && git ls-files '*.c' '*.h')
	if [ ${#unformatted[@]} -gt 0 ]; then
		echo "clang-format: these files differ from .clang-format: ${unformatted[*]}" >&2
		echo "run: clang-format -i ${unformatted[*]}" >&2
		exit 1
	fi
	build "$top/build-test" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWERROR=ON \
		-DSANITIZE=address,undefined
	say "running the tests"
	cd "$top/build-test"
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j "$jobs" --timeout 300
}

# Waits until the file's first lines hold a line starting with $2, or the
# process $3 dies.
wait_ready() {
	local i
	for i in $(seq 100); do
		grep -q "^$2" "$1" 2>/dev/null && return 0
		kill -0 "$3" 2>/dev/null || { cat "$1"; exit 1; }
		sleep 0.1
	done
	echo "timed out waiting for $1" >&2
	exit 1
}

cmd_run() {
	install_missing "${build_pkgs[@]}" "${run_pkgs[@]}"
	build "$top/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF
	local demo="$top/out/demo" game_port=${GAME_PORT:-27960} oa_port=${OA_PORT:-27961}
	local control_port=${CONTROL_PORT:-27980} http_port=${HTTP_PORT:-8471}
	local master_port=${MASTER_PORT:-27950} lobby_port=${LOBBY_PORT:-29471}
	mkdir -p "$demo/oa" "$demo/state" "$demo/master"
	[ -s "$demo/token" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$demo/token"
	chmod 600 "$demo/token"

	local pids=()
	cleanup() {
		local p
		for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
		for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	}
	trap cleanup EXIT
	trap 'exit 0' INT TERM

	say "starting rally-master on 127.0.0.1:$http_port (HTTP) and 127.0.0.1:$master_port (UDP)"
	"$top/build/master/rally-master" --http "127.0.0.1:$http_port" \
		--udp "127.0.0.1:$master_port" --relay-ip 127.0.0.1 --relay-bind 127.0.0.1 \
		--state-dir "$demo/master" 2>"$demo/master.log" &
	pids+=($!)
	wait_ready "$demo/master.log" ready "${pids[0]}"

	say "starting OpenArena on 127.0.0.1:$oa_port (LAN mode, no internet masters)"
	/usr/games/openarena-server +set fs_homepath "$demo/oa" +set dedicated 1 \
		+set net_enabled 1 +set net_ip 127.0.0.1 +set net_port "$oa_port" \
		+set sv_master1 "" +set sv_master2 "" +set sv_master3 "" +set sv_master4 "" \
		+set sv_master5 "" +set sv_hostname "rallypoint demo" +set ttycon 0 \
		+map oa_dm1 >"$demo/oa.log" 2>&1 &
	pids+=($!)

	say "starting rally-relay on 127.0.0.1:$game_port, heartbeating the local master"
	"$top/build/relay/rally-relay" --listen "127.0.0.1:$game_port" \
		--server "127.0.0.1:$oa_port" --master "127.0.0.1:$master_port" \
		--heartbeat-tag QuakeArena-1 --flatline-tag QuakeArena-1 --heartbeat-interval 60 \
		--state-dir "$demo/state" --control "127.0.0.1:$control_port" \
		--token-file "$demo/token" --debug 2>"$demo/relay.log" &
	pids+=($!)
	wait_ready "$demo/relay.log" ready "${pids[2]}"
	local i
	for i in $(seq 100); do
		quakestat -openarenam "127.0.0.1:$master_port" -retry 1 -mi 0.2 2>/dev/null |
			grep -q "127.0.0.1:$game_port" && break
		sleep 0.3
	done

	say "starting rally-lobby (host) on 127.0.0.1:$lobby_port, listed on the local master"
	mkdir -p "$demo/lobby"
	"$top/build/lobby/rally-lobby" host --name demo-host --lobby-name "rallypoint demo" \
		--io-dir "$demo/lobby" --local-port "$lobby_port" --stun off --upnp off \
		--lan-ip 127.0.0.1 --rendezvous "http://127.0.0.1:$http_port" \
		--publish "http://127.0.0.1:$http_port" --public --game-relay-port 0 \
		>"$demo/lobby.out" 2>"$demo/lobby.log" &
	pids+=($!)
	local code=""
	for i in $(seq 100); do
		code=$(sed -n 's/^CODE=//p' "$demo/lobby.out" 2>/dev/null | head -n 1)
		[ -n "$code" ] && break
		kill -0 "${pids[3]}" 2>/dev/null || {
			cat "$demo/lobby.log" >&2
			die "rally-lobby exited"
		}
		sleep 0.1
	done
	[ -n "$code" ] || die "rally-lobby printed no code (see $demo/lobby.log)"

	local tok
	tok=$(cat "$demo/token")
	cat <<EOF

rallypoint is up (logs in $demo: master.log, relay.log, oa.log, lobby.log)
  rally-master  http://127.0.0.1:$http_port (netpunch API, Fugitive repository, /metrics)
                udp 127.0.0.1:$master_port (Quake 3 master; the game server is listed there)
  rally-relay   udp 127.0.0.1:$game_port -> OpenArena on 127.0.0.1:$oa_port
                control http://127.0.0.1:$control_port, token in $demo/token
  rally-lobby   hosting "rallypoint demo" on udp 127.0.0.1:$lobby_port, code $code
                (events in $demo/lobby/lobby_out.jsonl; listed by the master)

Try:
  quakestat -openarenam 127.0.0.1:$master_port -retry 1 -mi 0.2  # lists the relay's address
  quakestat -q3s 127.0.0.1:$game_port                        # the server through the relay
  curl -s http://127.0.0.1:$http_port/list
  curl -s -d '{"id":"me","code":"MYCODE","name":"my lobby"}' http://127.0.0.1:$http_port/announce
  curl -s http://127.0.0.1:$http_port/metrics
  $top/build/lobby/rally-lobby code $code      # what the code says
  mkdir -p /tmp/joiner && $top/build/lobby/rally-lobby join $code --name you \\
       --io-dir /tmp/joiner --stun off --lan-ip 127.0.0.1 --rendezvous off --game-relay-port 0
                                                   # joins; Ctrl-C leaves
  curl -s -H "Authorization: Bearer $tok" http://127.0.0.1:$control_port/sessions
  curl -s -X PUT -H "Authorization: Bearer $tok" -d '{"reason":"test","duration":60}' \\
       http://127.0.0.1:$control_port/bans/127.0.0.1      # then quakestat -q3s gets nothing
  curl -s -X DELETE -H "Authorization: Bearer $tok" http://127.0.0.1:$control_port/bans/127.0.0.1
Ctrl-C stops everything.
EOF
	wait "${pids[2]}"
}

case "$mode" in
test) cmd_test ;;
run) cmd_run ;;
*)
	echo "usage: $0 run|test" >&2
	exit 2
	;;
esac
