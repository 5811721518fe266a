#!/usr/bin/env bash
# Starts or stops a throwaway PostgreSQL from Debian's server binaries on a
# private loopback port, for tests and benchmarks.
#
#   scripts/pg.sh start DIR [PORT]   prints the admin URL on stdout
#   scripts/pg.sh stop DIR
set -euo pipefail

pgbin() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
	done
	return 1
}

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR [PORT]" >&2; exit 2; }

case "$cmd" in
start)
	bin=$(pgbin) || { echo "pg.sh: no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (apt-get install postgresql)" >&2; exit 3; }
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	# initdb refuses to run as root: the cluster belongs to postgres, whose
	# way to the directory must be traversable.
	run=()
	if [ "$(id -u)" = 0 ]; then
		chown postgres:postgres "$dir"
		chmod 700 "$dir"
		p=$dir
		while [ "$p" != "/" ]; do p=$(dirname "$p"); chmod o+x "$p" 2>/dev/null || true; done
		run=(runuser -u postgres --)
	fi
	"${run[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 \
		|| { cat "$dir/initdb.log" >&2; exit 1; }
	# A random port below the kernel's ephemeral range (32768 and up), so
	# that it cannot collide with an outgoing connection; a port another
	# program holds is retried with another one.
	started=""
	for attempt in 1 2 3 4 5 6 7 8; do
		port=${3:-$(( 20000 + RANDOM % 12000 ))}
		# fsync stays on: the benchmarks measure durable commits.
		if "${run[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
			-o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200 -c shared_buffers=256MB" start >/dev/null; then
			started=1
			break
		fi
		[ -n "${3:-}" ] && break
	done
	[ -n "$started" ] || { cat "$dir/server.log" >&2; exit 1; }
	echo "$port" >"$dir/port"
	echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	;;
stop)
	bin=$(pgbin) || exit 0
	[ -d "$dir/data" ] || exit 0
	run=()
	[ "$(id -u)" = 0 ] && run=(runuser -u postgres --)
	"${run[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
	;;
*)
	echo "usage: $0 start|stop DIR [PORT]" >&2; exit 2
	;;
esac
