#!/usr/bin/env bash
# Azure Container Apps: provision the infrastructure once, then deploy revisions and gate them.
#   deploy/azure.sh provision     resource group, registry, Files share, environment + profile
#   deploy/azure.sh image [TAG]   build the image in the registry (no local Docker needed) under
#                                 a tag never used before (default: the commit); prints the
#                                 image pinned by digest, for IMAGE
#   deploy/azure.sh deploy        create or update the app from deploy/containerapp.yaml: a new
#                                 revision, checked and waited for
#   deploy/azure.sh gate          the post-deployment gate against the app's URL
# LAYOUT=distributed (default: single) provisions an Azure Cache for Redis too and deploys two
# apps from the one image: the web app (deploy/containerapp-web.yaml, APP_NAME) and the
# workers (deploy/containerapp-worker.yaml, WORKER_APP_NAME), scaled by KEDA on the jobs.
# Settings come from the environment; see docs/azure.md and
# "Beyond one replica".
set -euo pipefail

: "${RESOURCE_GROUP:?set RESOURCE_GROUP}"
: "${LOCATION:?set LOCATION, e.g. westeurope}"
APP_NAME="${APP_NAME:-imagegen}"
ENVIRONMENT="${ENVIRONMENT:-imagegen-env}"
STORAGE_ACCOUNT="${STORAGE_ACCOUNT:?set STORAGE_ACCOUNT (3-24 lowercase letters and digits)}"
SHARE_NAME="${SHARE_NAME:-models}"
REGISTRY="${REGISTRY:?set REGISTRY (the container registry name, 5-50 letters and digits)}"
# The dedicated profile. The app asks for a whole D4 node by default, and in single revision
# mode the old revision keeps its node until the new one is ready: a rollout needs 2 nodes.
WORKLOAD_PROFILE_TYPE="${WORKLOAD_PROFILE_TYPE:-D4}"
WORKLOAD_PROFILE_NAME="${WORKLOAD_PROFILE_NAME:-d4}"
MIN_NODES="${MIN_NODES:-1}"
MAX_NODES="${MAX_NODES:-2}"
# Seconds a deployment waits for its revision to be ready (a node start, a multi-GB image
# pull, the startup probe's 5 minutes), and between two looks.
ROLLOUT_TIMEOUT="${ROLLOUT_TIMEOUT:-1200}"
ROLLOUT_INTERVAL="${ROLLOUT_INTERVAL:-10}"
PYTHON="${PYTHON:-python3}"
LAYOUT="${LAYOUT:-single}"
case "$LAYOUT" in
  single | distributed) ;;
  *) echo "azure.sh: LAYOUT must be single or distributed, got '$LAYOUT'" >&2; exit 2 ;;
esac
WORKER_APP_NAME="${WORKER_APP_NAME:-$APP_NAME-worker}"
WORKER_MAX_REPLICAS="${WORKER_MAX_REPLICAS:-2}"
REDIS_NAME="${REDIS_NAME:-}"
# The environment's own network: its infrastructure subnet holds the ingress that every
# request arrives from, so the app believes X-Forwarded-* from there alone (TRUSTED_PROXIES).
VNET_PREFIX="${VNET_PREFIX:-10.42.0.0/16}"
INFRA_SUBNET="${INFRA_SUBNET:-10.42.0.0/23}"
# The oldest az that reads every field of deploy/containerapp.yaml and sends empty lists and
# secret values in `update --yaml` (docs/azure.md: "az versions"); the containerapp extension, when
# installed, replaces the built-in commands and must be at least as new.
MIN_AZ_CLI=2.53.0
MIN_CONTAINERAPP_EXTENSION=0.3.43
here="$(cd "$(dirname "$0")" && pwd)"

die() {
  echo "azure.sh: $*" >&2
  exit 1
}

version_at_least() {  # VERSION MINIMUM: true when VERSION >= MINIMUM
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]
}

require_az() {
  # An older az drops YAML fields it does not know without a word, so it is refused up front.
  command -v az >/dev/null || die "the az CLI is not installed"
  local cli extension
  cli="$(az version --query '"azure-cli"' --output tsv)"
  version_at_least "$cli" "$MIN_AZ_CLI" ||
    die "az $cli is older than $MIN_AZ_CLI, which this deployment needs (az upgrade)"
  extension="$(az version --query 'extensions.containerapp' --output tsv)"
  if [ -n "$extension" ] && ! version_at_least "$extension" "$MIN_CONTAINERAPP_EXTENSION"; then
    die "the containerapp extension $extension is older than $MIN_CONTAINERAPP_EXTENSION" \
      "(az extension update --name containerapp, or az extension remove --name containerapp)"
  fi
}

infrastructure_subnet() {
  # The address range of the environment's infrastructure subnet, where its ingress is.
  local subnet
  subnet="$(az containerapp env show --name "$ENVIRONMENT" --resource-group "$RESOURCE_GROUP" \
    --query properties.vnetConfiguration.infrastructureSubnetId --output tsv)"
  if [ -z "$subnet" ]; then
    # An environment made before provision gave it a network: deployed as before, no proxy
    # trusted (image links http, per-client limits by the ingress's address), and said.
    echo "azure.sh: warning: the environment $ENVIRONMENT has no network of its own, so its" \
      "ingress's addresses are unknown and no proxy is trusted; set TRUSTED_PROXIES, or move" \
      "to an environment provision makes (docs/azure.md)" >&2
    return 0
  fi
  az network vnet subnet show --ids "$subnet" --query addressPrefix --output tsv
}

provision() {
  [ "$MAX_NODES" -ge 2 ] ||
    die "MAX_NODES=$MAX_NODES: a rollout runs the old and the new revision side by side, each on a node of its own"
  if [ "$LAYOUT" = distributed ]; then
    : "${REDIS_NAME:?set REDIS_NAME (the Azure Cache for Redis name) for LAYOUT=distributed}"
    # One D4 node per worker, and one more for a rollout's new revision beside the old ones;
    # the web app runs on the consumption plan, outside the profile.
    [ "$MAX_NODES" -ge $((WORKER_MAX_REPLICAS + 1)) ] ||
      die "MAX_NODES=$MAX_NODES: LAYOUT=distributed needs WORKER_MAX_REPLICAS + 1 = $((WORKER_MAX_REPLICAS + 1)) nodes (one per worker, one for a rollout)"
  fi
  az group create --name "$RESOURCE_GROUP" --location "$LOCATION" --output none
  az acr create --name "$REGISTRY" --resource-group "$RESOURCE_GROUP" --location "$LOCATION" \
    --sku Basic --admin-enabled true --output none
  # Premium FileStorage: SMB throughput for a 7 GB download and a 48 s warm load.
  az storage account create --name "$STORAGE_ACCOUNT" --resource-group "$RESOURCE_GROUP" \
    --location "$LOCATION" --sku Premium_LRS --kind FileStorage --output none
  az storage share-rm create --storage-account "$STORAGE_ACCOUNT" \
    --resource-group "$RESOURCE_GROUP" --name "$SHARE_NAME" --quota 100 \
    --enabled-protocols SMB --output none
  az network vnet create --name "$ENVIRONMENT-vnet" --resource-group "$RESOURCE_GROUP" \
    --location "$LOCATION" --address-prefixes "$VNET_PREFIX" --output none
  az network vnet subnet create --name infrastructure --vnet-name "$ENVIRONMENT-vnet" \
    --resource-group "$RESOURCE_GROUP" --address-prefixes "$INFRA_SUBNET" \
    --delegations Microsoft.App/environments --output none
  local subnet
  subnet="$(az network vnet subnet show --name infrastructure --vnet-name "$ENVIRONMENT-vnet" \
    --resource-group "$RESOURCE_GROUP" --query id --output tsv)"
  az containerapp env create --name "$ENVIRONMENT" --resource-group "$RESOURCE_GROUP" \
    --location "$LOCATION" --enable-workload-profiles \
    --infrastructure-subnet-resource-id "$subnet" --output none
  az containerapp env workload-profile add --name "$ENVIRONMENT" \
    --resource-group "$RESOURCE_GROUP" --workload-profile-name "$WORKLOAD_PROFILE_NAME" \
    --workload-profile-type "$WORKLOAD_PROFILE_TYPE" --min-nodes "$MIN_NODES" \
    --max-nodes "$MAX_NODES" --output none
  local key
  key="$(az storage account keys list --account-name "$STORAGE_ACCOUNT" \
    --resource-group "$RESOURCE_GROUP" --query '[0].value' --output tsv)"
  az containerapp env storage set --name "$ENVIRONMENT" --resource-group "$RESOURCE_GROUP" \
    --storage-name models-share --azure-file-account-name "$STORAGE_ACCOUNT" \
    --azure-file-account-key "$key" --azure-file-share-name "$SHARE_NAME" \
    --access-mode ReadWrite --output none
  if [ "$LAYOUT" = distributed ]; then
    # Standard C1: non-clustered (Celery's Redis transport and the job store's scripts need
    # one keyspace), replicated, TLS on 6380.
    az redis create --name "$REDIS_NAME" --resource-group "$RESOURCE_GROUP" \
      --location "$LOCATION" --sku Standard --vm-size c1 --minimum-tls-version 1.2 \
      --output none
  fi
}

commit_tag() {
  # The commit, and a timestamp when the tree has uncommitted changes: a tag names one build.
  local tag
  tag="$(git -C "$here/.." rev-parse --short=12 HEAD)"
  if [ -n "$(git -C "$here/.." status --porcelain)" ]; then
    tag="$tag-dirty-$(date -u +%Y%m%d%H%M%S)"
  fi
  echo "$tag"
}

image() {
  : "${TORCH_INDEX_URL:?set TORCH_INDEX_URL, the PyTorch CPU wheel index (docs/operations.md, Container image)}"
  local tag="${1:-$(commit_tag)}" server digest
  # A reused tag is a new image under an old name: an update with the same image string is no
  # template change, so no new revision and the old container keeps running.
  if az acr repository show --name "$REGISTRY" --image "imagegen:$tag" --output none 2>/dev/null; then
    die "imagegen:$tag is already in $REGISTRY; tags are never reused (commit, or pass a new TAG)"
  fi
  az acr build --registry "$REGISTRY" --image "imagegen:$tag" \
    --build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL" "$here/.." >&2
  server="$(az acr show --name "$REGISTRY" --query loginServer --output tsv)"
  digest="$(az acr repository show --name "$REGISTRY" --image "imagegen:$tag" \
    --query digest --output tsv)"
  echo "$server/imagegen@$digest"
}

pinned() {
  # IMAGE by digest: what runs is exactly what was built, and a rebuild is a template change.
  local image="$1" server="$2" digest
  case "$image" in
    *@sha256:*) echo "$image"; return ;;
    "$server"/*:*) ;;
    *) die "IMAGE=$image: give an image of $server with its tag (from '$0 image') or pinned by digest" ;;
  esac
  digest="$(az acr repository show --name "$REGISTRY" --image "${image#"$server"/}" \
    --query digest --output tsv)"
  echo "${image%:*}@$digest"
}

apply_app() {  # NAME TEMPLATE: create or update one app, read it back, wait for its revision
  local name="$1" template="$2" spec
  local where=(--name "$name" --resource-group "$RESOURCE_GROUP")
  # The spec holds the secrets: private (mktemp), and removed however the script ends.
  spec="$(mktemp --suffix .yaml)"
  specs+=("$spec")
  "$PYTHON" "$here/render.py" < "$template" > "$spec"
  if az containerapp show "${where[@]}" --output none 2>/dev/null; then
    az containerapp update "${where[@]}" --yaml "$spec" --output none
  else
    az containerapp create "${where[@]}" --yaml "$spec" --output none
  fi
  az containerapp show "${where[@]}" --output json | "$PYTHON" "$here/readback.py" "$spec"
  PYTHONPATH="$here/.." "$PYTHON" -m imagegen.ops.platform wait-for-revision "${where[@]}" \
    --revision "$name--$REVISION_SUFFIX" --timeout "$ROLLOUT_TIMEOUT" \
    --interval "$ROLLOUT_INTERVAL"
}

redis_settings() {
  # The job store and broker: TLS, the access key URL-quoted (it may hold / + =).
  : "${REDIS_NAME:?set REDIS_NAME (the Azure Cache for Redis name) for LAYOUT=distributed}"
  local where=(--name "$REDIS_NAME" --resource-group "$RESOURCE_GROUP") host port quoted
  host="$(az redis show "${where[@]}" --query hostName --output tsv)"
  port="$(az redis show "${where[@]}" --query sslPort --output tsv)"
  REDIS_PASSWORD="$(az redis list-keys "${where[@]}" --query primaryKey --output tsv)"
  quoted="$("$PYTHON" -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$REDIS_PASSWORD")"
  REDIS_ADDRESS="$host:$port"
  JOB_BROKER_URL="rediss://:$quoted@$host:$port/0?ssl_cert_reqs=required"
  export REDIS_PASSWORD REDIS_ADDRESS JOB_BROKER_URL WORKER_APP_NAME WORKER_MAX_REPLICAS
}

deploy() {
  : "${IMAGE:?set IMAGE to the reference that deploy/azure.sh image printed}"
  : "${SECRET_KEY:?set SECRET_KEY}"
  : "${API_TOKEN:?set API_TOKEN (the service is public)}"
  : "${MONGODB_URI:?set MONGODB_URI (the todo database)}"
  REGISTRY_SERVER="$(az acr show --name "$REGISTRY" --query loginServer --output tsv)"
  IMAGE="$(pinned "$IMAGE" "$REGISTRY_SERVER")"
  REGISTRY_USERNAME="$(az acr credential show --name "$REGISTRY" --query username --output tsv)"
  REGISTRY_PASSWORD="$(az acr credential show --name "$REGISTRY" --query 'passwords[0].value' --output tsv)"
  ENVIRONMENT_ID="$(az containerapp env show --name "$ENVIRONMENT" \
    --resource-group "$RESOURCE_GROUP" --query id --output tsv)"
  REVISION_SUFFIX="${REVISION_SUFFIX:-$("$PYTHON" "$here/render.py" --new-revision-suffix)}"
  TRUSTED_PROXIES="${TRUSTED_PROXIES:-$(infrastructure_subnet)}"
  export LOCATION APP_NAME IMAGE SECRET_KEY API_TOKEN MONGODB_URI ENVIRONMENT_ID REVISION_SUFFIX
  export TRUSTED_PROXIES
  export REGISTRY_SERVER REGISTRY_USERNAME REGISTRY_PASSWORD WORKLOAD_PROFILE_NAME
  export MODEL_ID="${MODEL_ID:-stabilityai/stable-diffusion-xl-base-1.0}"
  specs=()
  trap 'rm -f "${specs[@]}"' EXIT
  if [ "$LAYOUT" = distributed ]; then
    redis_settings
    # Workers first: the web app then finds them (a pull reaches the running ones).
    apply_app "$WORKER_APP_NAME" "$here/containerapp-worker.yaml"
    apply_app "$APP_NAME" "$here/containerapp-web.yaml"
  else
    apply_app "$APP_NAME" "$here/containerapp.yaml"
  fi
}

gate() {
  local fqdn
  fqdn="$(az containerapp show --name "$APP_NAME" --resource-group "$RESOURCE_GROUP" \
    --query properties.configuration.ingress.fqdn --output tsv)"
  "$PYTHON" "$here/../manage.py" gate --base-url "https://$fqdn" \
    --container-app "$APP_NAME" --resource-group "$RESOURCE_GROUP" "$@"
}

case "${1:-}" in
  provision) require_az; provision ;;
  image) shift; require_az; image "$@" ;;
  deploy) require_az; deploy ;;
  gate) shift; require_az; gate "$@" ;;
  *) echo "usage: $0 provision|image [TAG]|deploy|gate [gate options]" >&2; exit 2 ;;
esac
