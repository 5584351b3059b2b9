# syntax=docker/dockerfile:1
# One image per seqflow binary, from the repository root:
#
#   docker build -f infra/docker/service.Dockerfile --build-arg SERVICE=sequencer   -t seqflow/sequencer:dev .
#   docker build -f infra/docker/service.Dockerfile --build-arg SERVICE=persister   -t seqflow/persister:dev .
#   docker build -f infra/docker/service.Dockerfile --build-arg SERVICE=pusher      -t seqflow/pusher:dev .
#   docker build -f infra/docker/service.Dockerfile --build-arg SERVICE=producer-gw -t seqflow/producer-gw:dev .
#   docker build -f infra/docker/service.Dockerfile --build-arg SERVICE=cmd/seqflow -t seqflow/seqflow:dev .
#
# One parameterised file rather than five copies: the services build the same
# way (static Go binary, no cgo) and differ only in the package path.
# Untested here (no Docker engine on the development machines): see
# infra/README.md.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
ARG SERVICE
RUN test -n "${SERVICE}" || { echo "--build-arg SERVICE=<sequencer|persister|pusher|producer-gw|cmd/seqflow> is required" >&2; exit 1; }
RUN --mount=type=cache,target=/root/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/app "./${SERVICE}"

# distroless/static: no shell, no package manager, runs as an unprivileged user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/app /usr/local/bin/app
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/app"]
