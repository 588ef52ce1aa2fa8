#!/usr/bin/env bash
# Azure Container Apps: provision the infrastructure once, then deploy revisions and gate them.
#   deploy/azure.sh provision     resource group, registry, Files share, environment (D4 profile)
#   deploy/azure.sh image TAG     build the image in the registry (no local Docker needed)
#   deploy/azure.sh deploy        create or update the app from deploy/containerapp.yaml
#   deploy/azure.sh gate          the post-deployment gate against the app's URL
# Settings come from the environment; see README.md, "Deploying to Azure Container Apps".
set -euo pipefail

: "${RESOURCE_GROUP:?set RESOURCE_GROUP}"
: "${LOCATION:?set LOCATION, e.g. westeurope}"
APP_NAME="${APP_NAME:-imagegen}"
ENVIRONMENT="${ENVIRONMENT:-imagegen-env}"
STORAGE_ACCOUNT="${STORAGE_ACCOUNT:?set STORAGE_ACCOUNT (3-24 lowercase letters and digits)}"
SHARE_NAME="${SHARE_NAME:-models}"
REGISTRY="${REGISTRY:?set REGISTRY (the container registry name, 5-50 letters and digits)}"
here="$(cd "$(dirname "$0")" && pwd)"

provision() {
  az group create --name "$RESOURCE_GROUP" --location "$LOCATION" --output none
  az acr create --name "$REGISTRY" --resource-group "$RESOURCE_GROUP" --location "$LOCATION" \
    --sku Basic --admin-enabled true --output none
  # Premium FileStorage: SMB throughput for a 7 GB download and a 48 s warm load.
  az storage account create --name "$STORAGE_ACCOUNT" --resource-group "$RESOURCE_GROUP" \
    --location "$LOCATION" --sku Premium_LRS --kind FileStorage --output none
  az storage share-rm create --storage-account "$STORAGE_ACCOUNT" \
    --resource-group "$RESOURCE_GROUP" --name "$SHARE_NAME" --quota 100 \
    --enabled-protocols SMB --output none
  az containerapp env create --name "$ENVIRONMENT" --resource-group "$RESOURCE_GROUP" \
    --location "$LOCATION" --enable-workload-profiles --output none
  az containerapp env workload-profile add --name "$ENVIRONMENT" \
    --resource-group "$RESOURCE_GROUP" --workload-profile-name d4 \
    --workload-profile-type D4 --min-nodes 1 --max-nodes 1 --output none
  local key
  key="$(az storage account keys list --account-name "$STORAGE_ACCOUNT" \
    --resource-group "$RESOURCE_GROUP" --query '[0].value' --output tsv)"
  az containerapp env storage set --name "$ENVIRONMENT" --resource-group "$RESOURCE_GROUP" \
    --storage-name models-share --azure-file-account-name "$STORAGE_ACCOUNT" \
    --azure-file-account-key "$key" --azure-file-share-name "$SHARE_NAME" \
    --access-mode ReadWrite --output none
}

image() {
  local tag="${1:?usage: $0 image TAG}"
  : "${TORCH_INDEX_URL:?set TORCH_INDEX_URL, the PyTorch CPU wheel index (README, Container image)}"
  az acr build --registry "$REGISTRY" --image "imagegen:$tag" \
    --build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL" "$here/.."
}

deploy() {
  : "${IMAGE:?set IMAGE, e.g. \$REGISTRY.azurecr.io/imagegen:TAG}"
  : "${SECRET_KEY:?set SECRET_KEY}"
  : "${API_TOKEN:?set API_TOKEN (the service is public)}"
  : "${MONGODB_URI:?set MONGODB_URI (the todo database)}"
  export LOCATION APP_NAME IMAGE SECRET_KEY API_TOKEN MONGODB_URI
  REGISTRY_SERVER="$(az acr show --name "$REGISTRY" --query loginServer --output tsv)"
  REGISTRY_USERNAME="$(az acr credential show --name "$REGISTRY" --query username --output tsv)"
  REGISTRY_PASSWORD="$(az acr credential show --name "$REGISTRY" --query 'passwords[0].value' --output tsv)"
  export REGISTRY_SERVER REGISTRY_USERNAME REGISTRY_PASSWORD
  export MODEL_ID="${MODEL_ID:-stabilityai/stable-diffusion-xl-base-1.0}"
  ENVIRONMENT_ID="$(az containerapp env show --name "$ENVIRONMENT" \
    --resource-group "$RESOURCE_GROUP" --query id --output tsv)"
  export ENVIRONMENT_ID
  local spec
  spec="$(mktemp --suffix .yaml)"
  trap 'rm -f "$spec"' RETURN
  "${PYTHON:-python3}" "$here/render.py" < "$here/containerapp.yaml" > "$spec"
  if az containerapp show --name "$APP_NAME" --resource-group "$RESOURCE_GROUP" --output none 2>/dev/null; then
    az containerapp update --name "$APP_NAME" --resource-group "$RESOURCE_GROUP" --yaml "$spec" --output none
  else
    az containerapp create --name "$APP_NAME" --resource-group "$RESOURCE_GROUP" --yaml "$spec" --output none
  fi
}

gate() {
  local fqdn
  fqdn="$(az containerapp show --name "$APP_NAME" --resource-group "$RESOURCE_GROUP" \
    --query properties.configuration.ingress.fqdn --output tsv)"
  "${PYTHON:-python3}" "$here/../manage.py" gate --base-url "https://$fqdn" \
    --container-app "$APP_NAME" --resource-group "$RESOURCE_GROUP" "$@"
}

case "${1:-}" in
  provision) provision ;;
  image) shift; image "$@" ;;
  deploy) deploy ;;
  gate) shift; gate "$@" ;;
  *) echo "usage: $0 provision|image TAG|deploy|gate [gate options]" >&2; exit 2 ;;
esac
