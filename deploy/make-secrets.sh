#!/bin/sh
# The secrets of deploy/compose.yaml, made once: the teacher's token, PostgreSQL's password and
# the same password as libpq's password file (pgpass). Mode 600, in deploy/secrets/ (or the
# folder given), which git ignores. An existing file is kept: delete it to make a new one.
set -eu
dir=${1:-$(dirname "$0")/secrets}
umask 077
mkdir -p "$dir"
fresh() { python3 -c 'import secrets; print(secrets.token_urlsafe(32))'; }
[ -s "$dir/token" ] || fresh > "$dir/token"
[ -s "$dir/db_password" ] || fresh > "$dir/db_password"
# host:port:database:user:password (token_urlsafe never writes ':' or '\')
printf '*:*:*:autograd:%s\n' "$(cat "$dir/db_password")" > "$dir/pgpass"
chmod 600 "$dir/token" "$dir/db_password" "$dir/pgpass"
echo "secrets in $dir: give the teacher the token in $dir/token"
