#!/usr/bin/env python3
"""A `podman` for `podman-compose --podman-path`, for Debian bookworm's podman-compose 1.0.3.

That version turns two things in docker-compose.yml into podman arguments that cannot
work, where docker compose and later podman-compose releases do what the file says
(containers/podman-compose#593):

- `network_mode: "service:caller"` is passed as `--network service:caller`, plus the
  project network. podman needs `--network container:<the caller's container>` alone.
- An exec-form healthcheck (`test: [CMD, ...]`) is wrapped in `/bin/sh -c`, which an
  image without a shell (distroless) cannot run. podman takes a JSON array as exec form.

This rewrites exactly those two argument patterns of `podman run` / `podman create` and
passes everything else, and every other command, to podman unchanged. With a
podman-compose that already translates them, it changes nothing.
"""
import json
import os
import shlex
import subprocess
import sys


def container_of_service(args, service):
    project = next((a.split('=', 1)[1] for a in args if a.startswith('com.docker.compose.project=')), None)
    if project is None:
        sys.exit('podman-compat: cannot tell the compose project of a service: network')
    names = subprocess.run(
        ['podman', 'ps', '-a', '--format', '{{.Names}}',
         '--filter', f'label=com.docker.compose.project={project}',
         '--filter', f'label=com.docker.compose.service={service}'],
        check=True, capture_output=True, text=True).stdout.split()
    if not names:
        sys.exit(f'podman-compat: no container for service "{service}" (start it first)')
    return names[0]


def rewrite(args):
    if not args or args[0] not in ('run', 'create'):
        return args
    out = []
    shared_netns = any(a == '--network' and b.startswith('service:') for a, b in zip(args, args[1:]))
    i = 0
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if a == '--network' and nxt is not None and nxt.startswith('service:'):
            out += ['--network', 'container:' + container_of_service(args, nxt.split(':', 1)[1])]
            i += 2
        elif shared_netns and a in ('--net', '--network-alias') and nxt is not None:
            i += 2  # the project network: a container in another's namespace has none of its own
        elif a == '--healthcheck-command' and nxt is not None and nxt.startswith('/bin/sh -c ') and "' '" in nxt:
            # 1.0.3 joins the words of `[CMD, ...]` with "' '" into one shell word holding
            # the whole command line (a `CMD-SHELL` string has no "' '" and is left alone).
            # Undo both levels of quoting to get the words back.
            line = ' '.join(shlex.split(nxt[len('/bin/sh -c '):]))
            out += [a, json.dumps(shlex.split(line))]
            i += 2
        else:
            out.append(a)
            i += 1
    return out


if __name__ == '__main__':
    argv = ['podman'] + rewrite(sys.argv[1:])
    os.execvp('podman', argv)
