#!/bin/sh
# The "agent" of the hello-judge example: a busybox script, no AI involved.
# It shows what an agent sees inside a Work container: the query (with the
# network notice when isolated), the dependency installed at build time, the
# Judge answering, a forbidden destination refused, and a name that is not
# the Judge's not resolved.
#
# Exit status: 0 as expected; 1 the judge did not answer; 2 a forbidden
# destination answered although the network is restricted.
set -u

# Debian's static busybox wget crashes with its own -T; bound each request
# with timeout instead.
fetch() { timeout 10 wget -q -O - "$@" 2>&1; }

echo "agent: my query is: $SFORGE_AGENT_QUERY"
echo "agent: dependency says: $(cat /workspace/dependency.txt)"
case "$SFORGE_AGENT_QUERY" in
*"Network access is restricted"*) isolated=1 ;;
*) isolated=0 ;;
esac

judge="${SFORGE_JUDGE_URL:?SFORGE_JUDGE_URL is not set: pass --judge-url}"
echo "agent: submitting to the judge at $judge/submit"
if answer=$(fetch --post-data "hello from the agent" "$judge/submit"); then
	echo "agent: the judge answered: $answer"
else
	echo "agent: FAILED to reach the judge: $answer"
	exit 1
fi

for url in ${FORBIDDEN_URLS:-}; do
	echo "agent: trying a destination that is not the judge: $url"
	if out=$(fetch "$url"); then
		if [ "$isolated" = 1 ]; then
			echo "agent: LEAK: $url answered although the network is restricted: $out"
			exit 2
		fi
		echo "agent: it answered (the network is open for this run): $out"
	else
		echo "agent: refused, as expected: $out"
	fi
done
for name in ${FORBIDDEN_NAMES:-}; do
	echo "agent: looking up a name that is not the judge's: $name"
	if out=$(timeout 10 nslookup -type=a "$name" 2>&1); then
		if [ "$isolated" = 1 ]; then
			echo "agent: LEAK: $name resolved although the network is restricted: $out"
			exit 2
		fi
		echo "agent: it resolved (the network is open for this run)"
	else
		echo "agent: not resolved, as expected: $(echo "$out" | tail -n 1)"
	fi
done
echo "agent: done"
