#!/bin/sh
# npm run mutation:<area> [-- stryker options]: one area's StrykerJS run, then its
# incremental report trimmed (stryker/trim-report.mjs). Exits with StrykerJS's status, so a
# score below the area's breakAt still fails.
area=$1
shift
npx stryker run "stryker/$area.config.mjs" "$@"
status=$?
node stryker/trim-report.mjs "reports/mutation/$area.incremental.json"
exit $status
