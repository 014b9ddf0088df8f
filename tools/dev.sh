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
# starts (removed afterwards if we created it), and the services the new
# packages ship are then disabled at boot (unless they were enabled before),
# so a reboot does not bring up a stock server on the ports we use.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
jobs=$(nproc 2>/dev/null || echo 2)

# help2man makes the man pages from each --help at build time; dpkg-dev's
# dpkg-shlibdeps names the .deb's library dependencies (cpack -G DEB).
build_pkgs=(build-essential cmake pkg-config libmicrohttpd-dev libjson-c-dev libsodium-dev
	libssl-dev libcurl4-openssl-dev libminiupnpc-dev libnatpmp-dev libwslay-dev libpq-dev zlib1g-dev
	libhiredis-dev help2man dpkg-dev)
run_pkgs=(openarena-server qstat curl python3 iproute2)
# The network lab (tests/lab): nftables NATs, stund as the STUN server,
# miniupnpd with its nftables backend as the UPnP router. git lists the
# files whose formatting is checked. The relay's tunnel tests: a real
# PostgreSQL server (started by the test in a scratch directory, never the
# packaged cluster), a coa Host Manager peer on websockets + PyNaCl, and
# nginx terminating TLS in front of the tunnel (a scratch prefix, never the
# packaged service); the master's page is tested in headless chromium
# through selenium; promtool (prometheus) checks tools/monitoring; the masters'
# shared registry (--redis) is tested against a redis-server the test starts in
# a scratch directory (never the packaged service); the .deb is checked by
# lintian, its units by systemd-analyze (systemd, also what the package depends
# on), its man pages by man-db (install_deb).
test_pkgs=(openarena-server qstat python3 iproute2 clang-format curl nftables stun-server
	miniupnpd miniupnpd-nftables git postgresql python3-websockets python3-nacl nginx
	chromium chromium-driver python3-selenium prometheus redis-server lintian man-db systemd)

say() { printf '\n== %s\n' "$*"; }
die() {
	echo "dev.sh: $*" >&2
	exit 1
}

# Installed packages, one per line, sorted (arch-qualified where dpkg needs it).
installed_pkgs() {
	dpkg-query -W -f='${db:Status-Abbrev} ${binary:Package}\n' 2>/dev/null |
		awk '$1 == "ii" { print $2 }' | sort -u
}

# Services that start at boot now, one name per line: init scripts with an
# S link in a multi-user runlevel, enabled systemd service units. Both work
# whether or not systemd is PID 1 (systemctl reads the unit files).
enabled_services() {
	local l
	for l in /etc/rc[2345].d/S[0-9][0-9]*; do
		[ -L "$l" ] || [ -e "$l" ] || continue
		basename "$l" | sed 's/^S[0-9][0-9]//'
	done
	if command -v systemctl >/dev/null 2>&1; then
		systemctl list-unit-files --type=service --state=enabled --no-legend 2>/dev/null |
			awk '{ sub(/\.service$/, "", $1); print $1 }'
	fi
	return 0
}

# The services packages ship, one name per line: their init scripts and
# systemd service units (openarena-server, stun for stun-server, miniupnpd,
# nftables). Template units (name@.service) need an instance: not ours.
services_of() {
	dpkg -L "$@" 2>/dev/null | sed -n -e 's|^/etc/init\.d/\([^/]*\)$|\1|p' \
		-e 's|^/\(usr/\)\{0,1\}lib/systemd/system/\([^/@]*\)\.service$|\2|p' | sort -u
}

# Keeps service $1 from starting at boot; starts and stops nothing.
disable_service() {
	local s=$1 state
	if [ -d /run/systemd/system ]; then
		# systemd is PID 1: systemctl also turns an init script's rc
		# links off (systemd-sysv-install).
		systemctl disable --quiet "$s.service" >/dev/null 2>&1 || true
	else
		if [ -e "/etc/init.d/$s" ]; then
			update-rc.d "$s" disable >/dev/null 2>&1 ||
				rm -f /etc/rc[0-6S].d/S[0-9][0-9]"$s"
		fi
		# The unit's symlinks too, for a later boot under systemd
		# (systemctl edits them without a running systemd).
		if command -v systemctl >/dev/null 2>&1; then
			systemctl disable --quiet "$s.service" >/dev/null 2>&1 || true
		fi
	fi
	# What disable cannot turn off (a static or indirectly enabled unit)
	# is masked.
	if command -v systemctl >/dev/null 2>&1; then
		state=$(systemctl is-enabled "$s.service" 2>/dev/null || true)
		case $state in
		disabled | masked | "") ;;
		*) systemctl mask --quiet "$s.service" >/dev/null 2>&1 || true ;;
		esac
	fi
	echo "dev.sh: $s will not start at boot (it was not enabled before we installed it)"
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
	local made_policy=0 before_pkgs before_enabled new_pkgs s ok=1
	before_pkgs=$(installed_pkgs)
	before_enabled=$(enabled_services)
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		made_policy=1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq &&
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || ok=0
	[ $made_policy -eq 1 ] && rm -f /usr/sbin/policy-rc.d
	[ $ok -eq 1 ] || die "apt-get install ${missing[*]} failed"
	# policy-rc.d only blocked the start at install time: the packages'
	# scripts still enabled their services at boot. Dependencies count too.
	new_pkgs=$(comm -13 <(echo "$before_pkgs") <(installed_pkgs))
	[ -n "$new_pkgs" ] || return 0
	# shellcheck disable=SC2086 # one package name per word
	for s in $(services_of $new_pkgs); do
		grep -qxF "$s" <<<"$before_enabled" || disable_service "$s"
	done
	return 0
}

# Fails before anything starts when one of the ports is taken, naming the
# process that holds it. Arguments: proto:port:VARIABLE.
check_ports() {
	local spec proto port var lines busy=0
	for spec in "$@"; do
		IFS=: read -r proto port var <<<"$spec"
		if [ "$proto" = udp ]; then
			lines=$(ss -Hlunp "sport = :$port" 2>/dev/null || true)
		else
			lines=$(ss -Hltnp "sport = :$port" 2>/dev/null || true)
		fi
		[ -n "$lines" ] || continue
		busy=1
		echo "dev.sh: $proto port $port is taken (set $var=... to use another):" >&2
		while IFS= read -r l; do
			local who pid
			who=$(grep -o 'users:(.*)' <<<"$l" || true)
			pid=$(grep -o 'pid=[0-9]*' <<<"$who" | head -n 1 | cut -d= -f2 || true)
			if [ -n "$pid" ]; then
				echo "    by pid $pid: $(ps -o args= -p "$pid" 2>/dev/null | cut -c1-160)" >&2
			else
				echo "    by a process ss cannot name (run as root to see it)" >&2
			fi
			echo "    ss: $l" >&2
		done <<<"$lines"
	done
	[ $busy -eq 0 ] ||
		die "ports in use: stop what holds them (a stock server: systemctl stop openarena-server, or service openarena-server stop) or pick other ports with the variables named above"
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
	local f files unformatted=()
	# Listed first: a failure inside a process substitution would go
	# unnoticed and leave nothing checked.
	files=$(cd "$top" && git ls-files '*.c' '*.h') ||
		die "git ls-files failed in $top: the formatting check needs a git checkout (owned by another user? git config --global --add safe.directory $top)"
	[ -n "$files" ] || die "git ls-files lists no C files in $top: nothing to check the formatting of"
	while IFS= read -r f; do
		clang-format --dry-run --Werror "$top/$f" >/dev/null 2>&1 || unformatted+=("$f")
	done <<<"$files"
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
	for _ in $(seq 100); do
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
	check_ports "udp:$game_port:GAME_PORT" "udp:$oa_port:OA_PORT" "udp:$master_port:MASTER_PORT" \
		"udp:$lobby_port:LOBBY_PORT" "tcp:$control_port:CONTROL_PORT" "tcp:$http_port:HTTP_PORT"
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
	# Listed once the master counts a Q3 server and has had an infoResponse
	# from this run's heartbeat (a restored snapshot alone does not count).
	# Asked over HTTP: a getservers from here would spend the per-IP budget
	# (4 in a row, then 1 per 3 s) of the quakestat we print below.
	local listed=0
	for _ in $(seq 100); do
		curl -fsS "http://127.0.0.1:$http_port/metrics" 2>/dev/null | awk '
			$1 == "rally_master_q3_servers" && $2 >= 1 { s = 1 }
			$1 == "rally_master_q3_packets_total{type=\"inforesponse\"}" && $2 >= 1 { r = 1 }
			END { exit !(s && r) }' && { listed=1; break; }
		kill -0 "${pids[2]}" 2>/dev/null || { cat "$demo/relay.log" >&2; die "rally-relay exited"; }
		sleep 0.3
	done
	[ $listed -eq 1 ] || die "the master did not list the server within 30 s (see $demo/relay.log, $demo/oa.log, $demo/master.log)"

	say "starting rally-lobby (host) on 127.0.0.1:$lobby_port, listed on the local master"
	mkdir -p "$demo/lobby"
	"$top/build/lobby/rally-lobby" host --name demo-host --lobby-name "rallypoint demo" \
		--io-dir "$demo/lobby" --local-port "$lobby_port" --stun off --upnp off \
		--lan-ip 127.0.0.1 --rendezvous "http://127.0.0.1:$http_port" \
		--publish "http://127.0.0.1:$http_port" --public --game-relay-port 0 \
		>"$demo/lobby.out" 2>"$demo/lobby.log" &
	pids+=($!)
	local code=""
	for _ in $(seq 100); do
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
