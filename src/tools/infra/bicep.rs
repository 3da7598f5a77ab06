//! `infra/bicep/`: `topology.json`, rendered from the same entity specs
//! `bosun topology plan` and `apply` use (so the Service Bus entities,
//! their settings and their rules have one source), and `main.bicep`,
//! which reads it with `loadJsonContent` and deploys the namespace, the
//! storage account, PostgreSQL and one user-assigned identity per consumer
//! with the least rights it needs:
//!
//! - Azure Service Bus Data Receiver on its own queue and its own
//!   subscription (nothing else reaches it);
//! - Azure Service Bus Data Sender on its own queue (retries, scheduled
//!   polls and timeouts: a consumer sends commands only to itself) and on
//!   the events topic (its events, retries of events);
//! - Storage Blob Data Contributor on the claim check's container, and on
//!   the whole account only for consumers that keep blobs of their own.
//!
//! The API's identity sends to and receives from the whole namespace (it
//! sends any command and lists and replays any dead letter) and uses every
//! container; KEDA's reads the message counts it scales on.
//!
//! PostgreSQL signs in Microsoft Entra principals, and bosun's components
//! share one: the identity [`DATABASE_IDENTITY`], with a federated
//! credential for every ServiceAccount of bosun's, made the server's Entra
//! administrator. One principal, because every component reads and writes
//! the same tables in one schema, and whichever pod's init container runs
//! a migration owns what it creates: per-component principals would each
//! own some tables and lack rights on the others'. A pod asks for the
//! database's tokens as that identity (`BOSUN_DATABASE_CLIENT_ID`) with its
//! own ServiceAccount's token; its own identity keeps its Service Bus and
//! blob rights alone.

use serde_json::{Value, json};

use super::{ConsumerInfra, InfraSettings, RenderedFile, blob_containers, header};
use crate::backends::servicebus::plan::{self, Description, iso8601_duration};
use crate::host::claim_check;
use crate::runtime::registry;

/// Every file of `bicep/`.
pub fn render(consumers: &[ConsumerInfra], settings: &InfraSettings) -> Vec<RenderedFile> {
    let topology = topology_json(consumers, settings);
    vec![
        RenderedFile {
            path: "bicep/topology.json".to_owned(),
            text: format!("{}\n", serde_json::to_string_pretty(&topology).unwrap_or_default()),
        },
        RenderedFile {
            path: "bicep/main.bicep".to_owned(),
            text: format!("{}{MAIN_BICEP}", header("//")),
        },
    ]
}

/// What the API's identity is called in `topology.json`'s identities.
pub const API_COMPONENT: &str = "api";
/// What KEDA's identity is called in `topology.json`'s identities.
pub const KEDA_COMPONENT: &str = "keda";
/// The identity every component signs in to PostgreSQL as (the server's
/// Microsoft Entra administrator), and so the PostgreSQL user of
/// `BOSUN_DATABASE_URL`.
pub const DATABASE_IDENTITY: &str = "bosun-database";
/// How many federated credentials one user-assigned identity may have
/// (Azure's limit): the database identity has one per ServiceAccount.
pub const MAX_FEDERATED_CREDENTIALS: usize = 20;

/// `topology.json`: the entities, the containers and every identity's
/// grants, as indices into those lists (Bicep's resource loops are indexed
/// by position).
pub fn topology_json(consumers: &[ConsumerInfra], settings: &InfraSettings) -> Value {
    let topology = registry::topology();
    let specs = plan::desired_entities(&topology, &settings.topology);
    let options = settings.topology;
    let queues: Vec<&str> = topology.queues.iter().map(String::as_str).collect();
    let subscriptions: Vec<&str> = topology.subscriptions.iter().map(|s| s.name.as_str()).collect();
    // The entities that require sessions (RequiresSession is set only when
    // an entity is created; `bosun topology plan` says what to recreate).
    let session_keyed = |name: &&str| topology.session_keyed(name).is_some();
    let session_queues: Vec<&str> = queues.iter().copied().filter(session_keyed).collect();
    let session_subscriptions: Vec<&str> = subscriptions.iter().copied().filter(session_keyed).collect();
    let mut rules = Vec::new();
    for spec in &specs {
        if let Description::Rule { name, sql_filter } = &spec.description {
            let subscription = spec
                .path
                .split('/')
                .nth(2)
                .and_then(|name| subscriptions.iter().position(|s| *s == name));
            if let Some(subscription) = subscription {
                rules.push(json!({"subscription": subscription, "name": name, "sqlFilter": sql_filter}));
            }
        }
    }

    let mut identities = Vec::new();
    let mut queue_grants = Vec::new();
    let mut subscription_grants = Vec::new();
    let mut topic_grants = Vec::new();
    let mut namespace_grants = Vec::new();
    let mut blob_grants = Vec::new();
    let containers = blob_containers();
    let payloads = containers.iter().position(|c| *c == claim_check::CONTAINER);
    for consumer in consumers {
        let identity = identities.len();
        identities.push(json!({
            "name": consumer.object_name(),
            "component": consumer.name,
            "serviceAccount": consumer.object_name(),
            "kedaOperator": false,
        }));
        if let Some(queue) = queues.iter().position(|q| *q == consumer.name) {
            queue_grants.push(json!({"identity": identity, "queue": queue, "role": "serviceBusDataReceiver"}));
            queue_grants.push(json!({"identity": identity, "queue": queue, "role": "serviceBusDataSender"}));
        }
        if let Some(subscription) = consumer
            .subscription
            .as_ref()
            .and_then(|name| subscriptions.iter().position(|s| s == name))
        {
            subscription_grants.push(json!({"identity": identity, "subscription": subscription}));
        }
        topic_grants.push(json!({"identity": identity}));
        if consumer.keeps_blobs {
            blob_grants.push(json!({"identity": identity, "container": null}));
        } else {
            blob_grants.push(json!({"identity": identity, "container": payloads}));
        }
    }
    let api = identities.len();
    identities.push(json!({
        "name": "bosun-api",
        "component": API_COMPONENT,
        "serviceAccount": "bosun-api",
        "kedaOperator": false,
    }));
    namespace_grants.push(json!({"identity": api, "role": "serviceBusDataReceiver"}));
    namespace_grants.push(json!({"identity": api, "role": "serviceBusDataSender"}));
    blob_grants.push(json!({"identity": api, "container": null}));
    let keda = identities.len();
    identities.push(json!({
        "name": "bosun-keda",
        "component": KEDA_COMPONENT,
        "serviceAccount": null,
        "kedaOperator": true,
    }));
    // KEDA's Service Bus scaler reads runtime counts through the
    // management API, which needs the Manage right (Data Owner).
    namespace_grants.push(json!({"identity": keda, "role": "serviceBusDataOwner"}));
    // Every ServiceAccount of bosun's (not KEDA's) may sign in to the
    // database as its identity.
    let database_accounts: Vec<Value> = identities
        .iter()
        .filter_map(|identity| identity["serviceAccount"].as_str())
        .map(|account| json!(account))
        .collect();

    json!({
        "entity": {
            "lockDuration": iso8601_duration(options.lock_duration),
            "maxDeliveryCount": options.max_delivery_count,
            "duplicateDetectionHistoryTimeWindow": iso8601_duration(options.duplicate_detection_window),
            "defaultMessageTimeToLive": iso8601_duration(options.default_message_ttl),
        },
        "queues": queues,
        "topic": topology.topic,
        "subscriptions": subscriptions,
        "sessionQueues": session_queues,
        "sessionSubscriptions": session_subscriptions,
        "rules": rules,
        "containers": containers,
        "claimCheckContainer": claim_check::CONTAINER,
        "identities": identities,
        "database": {
            "identity": DATABASE_IDENTITY,
            "serviceAccounts": database_accounts,
        },
        "grants": {
            "queues": queue_grants,
            "subscriptions": subscription_grants,
            "topic": topic_grants,
            "namespace": namespace_grants,
            "blobs": blob_grants,
        },
    })
}

/// The Bicep template; every list in it comes from `topology.json`.
const MAIN_BICEP: &str = r#"//
// Deploys what bosun needs on Azure, into one resource group:
//   az deployment group create --resource-group RG --template-file infra/bicep/main.bicep \
//     --parameters serviceBusNamespaceName=... storageAccountName=... postgresServerName=... \
//                  aksOidcIssuerUrl=... aksEgressIp=...
// The deployment also removes the `$Default` rule Azure gives every new
// subscription (it would let every event through), with a deployment script
// of its own identity: no step needs a person with Manage rights.
// bosun signs in to PostgreSQL with Microsoft Entra ID tokens of its database
// identity, the server's Entra administrator; password sign-in is off unless
// postgresPasswordAuth=Enabled (an install that still uses a password URL).

targetScope = 'resourceGroup'

@description('Azure region of every resource.')
param location string = resourceGroup().location

@description('Service Bus namespace name (globally unique); BOSUN_SERVICEBUS_NAMESPACE.')
param serviceBusNamespaceName string

@description('Storage account name (globally unique, 3-24 lowercase letters and digits); BOSUN_BLOB_URL is https://NAME.blob.core.windows.net.')
param storageAccountName string

@description('PostgreSQL flexible server name (globally unique).')
param postgresServerName string

@description('Password sign-in to PostgreSQL. Disabled: bosun signs in with Entra ID tokens of its database identity, and nothing else needs a password. Enabled (with postgresAdminLogin and postgresAdminPassword): only while an install moves from a password BOSUN_DATABASE_URL to Entra ID (docs/UPGRADING.md).')
@allowed(['Disabled', 'Enabled'])
param postgresPasswordAuth string = 'Disabled'

@description('PostgreSQL password administrator login, with postgresPasswordAuth=Enabled (it cannot change once the server exists).')
param postgresAdminLogin string = 'bosun'

@secure()
@description('PostgreSQL password administrator password, with postgresPasswordAuth=Enabled.')
param postgresAdminPassword string = ''

@description('PostgreSQL compute size.')
param postgresSkuName string = 'Standard_B2s'

@description('PostgreSQL compute tier of that size.')
@allowed(['Burstable', 'GeneralPurpose', 'MemoryOptimized'])
param postgresSkuTier string = 'Burstable'

@description('The OIDC issuer URL of the AKS cluster: az aks show -g RG -n AKS --query oidcIssuerProfile.issuerUrl -o tsv')
param aksOidcIssuerUrl string

@description('The public outbound IP of the AKS cluster, let through the PostgreSQL firewall (a server with public access refuses every client no rule lets in): az network public-ip show --ids "$(az aks show -g RG -n AKS --query "networkProfile.loadBalancerProfile.effectiveOutboundIPs[0].id" -o tsv)" --query ipAddress -o tsv')
param aksEgressIp string

@description('The Kubernetes namespace bosun runs in (the overlay sets it).')
param kubernetesNamespace string = 'bosun'

@description('The Kubernetes namespace of the KEDA operator.')
param kedaNamespace string = 'keda'

@description('The ServiceAccount of the KEDA operator.')
param kedaServiceAccount string = 'keda-operator'

@description('Days a claim-checked payload is kept: longer than a message lives (its time to live) and than you keep dead letters you may replay.')
@minValue(1)
param payloadRetentionDays int = 30

var topology = loadJsonContent('topology.json')

// Built-in role definitions.
var roles = {
  serviceBusDataReceiver: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0')
  serviceBusDataSender: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39')
  serviceBusDataOwner: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '090c5cfd-751d-490a-894a-3ce6f1109419')
  storageBlobDataContributor: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', 'ba92f5b4-2d11-453d-a403-e96b0029c9fe')
}

// -- Service Bus ---------------------------------------------------------------

resource serviceBus 'Microsoft.ServiceBus/namespaces@2024-01-01' = {
  name: serviceBusNamespaceName
  location: location
  sku: {
    name: 'Standard'
    tier: 'Standard'
  }
  properties: {
    // Entra ID only: every client uses its managed identity.
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
  }
}

resource queues 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' = [
  for queue in topology.queues: {
    parent: serviceBus
    name: queue
    properties: {
      lockDuration: topology.entity.lockDuration
      maxDeliveryCount: topology.entity.maxDeliveryCount
      requiresDuplicateDetection: true
      duplicateDetectionHistoryTimeWindow: topology.entity.duplicateDetectionHistoryTimeWindow
      defaultMessageTimeToLive: topology.entity.defaultMessageTimeToLive
      deadLetteringOnMessageExpiration: true
      requiresSession: contains(topology.sessionQueues, queue)
      enableBatchedOperations: true
    }
  }
]

resource topic 'Microsoft.ServiceBus/namespaces/topics@2024-01-01' = {
  parent: serviceBus
  name: topology.topic
  properties: {
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: topology.entity.duplicateDetectionHistoryTimeWindow
    defaultMessageTimeToLive: topology.entity.defaultMessageTimeToLive
    enableBatchedOperations: true
  }
}

resource subscriptions 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2024-01-01' = [
  for subscription in topology.subscriptions: {
    parent: topic
    name: subscription
    properties: {
      lockDuration: topology.entity.lockDuration
      maxDeliveryCount: topology.entity.maxDeliveryCount
      defaultMessageTimeToLive: topology.entity.defaultMessageTimeToLive
      deadLetteringOnMessageExpiration: true
      deadLetteringOnFilterEvaluationExceptions: true
      requiresSession: contains(topology.sessionSubscriptions, subscription)
      enableBatchedOperations: true
    }
  }
]

// Two rules per subscription: its event types, and messages replayed to it alone
// (a session subscription takes only those: each event is addressed to it with
// its session id, so its type rule is `1=0`).
resource rules 'Microsoft.ServiceBus/namespaces/topics/subscriptions/rules@2024-01-01' = [
  for rule in topology.rules: {
    parent: subscriptions[rule.subscription]
    name: rule.name
    properties: {
      filterType: 'SqlFilter'
      sqlFilter: {
        sqlExpression: rule.sqlFilter
      }
    }
  }
]

// Every subscription is created with a `$Default` rule (`1=1`) beside
// bosun's: it would give the subscription every event. ARM cannot declare a
// rule named `$Default`, only delete it, so a deployment script does, as
// an identity of its own with Manage rights on this namespace only (deleting
// a rule that is already gone succeeds; it retries while the new role
// assignment propagates). `bosun topology plan` shows the result.
resource topologyIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: 'bosun-topology'
  location: location
}

resource topologyGrant 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: serviceBus
  name: guid(serviceBus.id, topologyIdentity.id, roles.serviceBusDataOwner)
  properties: {
    roleDefinitionId: roles.serviceBusDataOwner
    principalId: topologyIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource removeDefaultRules 'Microsoft.Resources/deploymentScripts@2023-08-01' = {
  name: 'bosun-remove-default-rules'
  location: location
  kind: 'AzureCLI'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${topologyIdentity.id}': {}
    }
  }
  properties: {
    azCliVersion: '2.67.0'
    timeout: 'PT30M'
    retentionInterval: 'PT1H'
    cleanupPreference: 'OnSuccess'
    environmentVariables: [
      { name: 'RESOURCE_GROUP', value: resourceGroup().name }
      { name: 'NAMESPACE', value: serviceBus.name }
      { name: 'TOPIC', value: topology.topic }
      { name: 'SUBSCRIPTIONS', value: join(topology.subscriptions, ' ') }
    ]
    scriptContent: '''
set -eu
for subscription in $SUBSCRIPTIONS; do
  attempt=1
  until az servicebus topic subscription rule delete --only-show-errors \
      --resource-group "$RESOURCE_GROUP" --namespace-name "$NAMESPACE" --topic-name "$TOPIC" \
      --subscription-name "$subscription" --name '$Default'; do
    if [ "$attempt" -ge 30 ]; then
      echo "could not remove the \$Default rule of $subscription" >&2
      exit 1
    fi
    attempt=$((attempt + 1))
    sleep 10
  done
done
'''
  }
  dependsOn: [rules, topologyGrant]
}

// -- Blob storage ----------------------------------------------------------------

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  // checkov:skip=CKV_AZURE_35: the pods reach the account over its public endpoint from the cluster's egress; what guards it is Entra ID only (no keys, no SAS) and least-privilege roles; add networkAcls or a private endpoint per environment
  // checkov:skip=CKV_AZURE_206: zone-redundant (ZRS): payloads, logs and results are working data of deliveries, a copy in another region is not needed
  // checkov:skip=CKV_AZURE_43: the name is a parameter; Azure checks its naming rules at deployment
  name: storageAccountName
  location: location
  sku: {
    name: 'Standard_ZRS'
  }
  kind: 'StorageV2'
  properties: {
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    allowBlobPublicAccess: false
    // Entra ID only: no account keys, no SAS.
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: storage
  name: 'default'
  properties: {
    deleteRetentionPolicy: {
      enabled: true
      days: 7
    }
  }
}

resource containers 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = [
  for container in topology.containers: {
    parent: blobService
    name: container
    properties: {
      publicAccess: 'None'
    }
  }
]

resource lifecycle 'Microsoft.Storage/storageAccounts/managementPolicies@2023-05-01' = {
  parent: storage
  name: 'default'
  properties: {
    policy: {
      rules: [
        {
          name: 'delete-claim-checked-payloads'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: ['blockBlob']
              prefixMatch: ['${topology.claimCheckContainer}/']
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: payloadRetentionDays
                }
              }
            }
          }
        }
      ]
    }
  }
  dependsOn: [containers]
}

// -- PostgreSQL ------------------------------------------------------------------

resource postgres 'Microsoft.DBforPostgreSQL/flexibleServers@2024-08-01' = {
  name: postgresServerName
  location: location
  sku: {
    name: postgresSkuName
    tier: postgresSkuTier
  }
  properties: {
    version: '16'
    administratorLogin: postgresPasswordAuth == 'Enabled' ? postgresAdminLogin : null
    administratorLoginPassword: postgresPasswordAuth == 'Enabled' ? postgresAdminPassword : null
    authConfig: {
      activeDirectoryAuth: 'Enabled'
      passwordAuth: postgresPasswordAuth
      tenantId: subscription().tenantId
    }
    storage: {
      storageSizeGB: 32
      autoGrow: 'Enabled'
    }
    backup: {
      backupRetentionDays: 7
      geoRedundantBackup: 'Disabled'
    }
    highAvailability: {
      mode: 'Disabled'
    }
    network: {
      publicNetworkAccess: 'Enabled'
    }
  }
}

// Only the cluster's outbound address may connect.
resource postgresFirewall 'Microsoft.DBforPostgreSQL/flexibleServers/firewallRules@2024-08-01' = {
  parent: postgres
  name: 'aks-egress'
  properties: {
    startIpAddress: aksEgressIp
    endIpAddress: aksEgressIp
  }
}

// The server's children one after another: it refuses a second change while
// one is being applied (ServerIsBusy).
resource database 'Microsoft.DBforPostgreSQL/flexibleServers/databases@2024-08-01' = {
  parent: postgres
  name: 'bosun'
  properties: {
    charset: 'UTF8'
    collation: 'en_US.utf8'
  }
  dependsOn: [postgresFirewall]
}

// The identity every component signs in to PostgreSQL as. One principal for
// all: they share one schema, and the pod whose init container runs a
// migration owns the tables it creates, so per-component principals would
// lack rights on each other's tables. Each ServiceAccount of bosun's may
// exchange its token for this identity's (BOSUN_DATABASE_CLIENT_ID); its own
// identity keeps the Service Bus and blob rights alone.
resource databaseIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: topology.database.identity
  location: location
}

// One federated credential per ServiceAccount (Azure takes one write of an
// identity's credentials at a time).
@batchSize(1)
resource databaseFederatedCredentials 'Microsoft.ManagedIdentity/userAssignedIdentities/federatedIdentityCredentials@2023-01-31' = [
  for serviceAccount in topology.database.serviceAccounts: {
    parent: databaseIdentity
    name: serviceAccount
    properties: {
      issuer: aksOidcIssuerUrl
      subject: 'system:serviceaccount:${kubernetesNamespace}:${serviceAccount}'
      audiences: ['api://AzureADTokenExchange']
    }
  }
]

// The database identity is the server's Microsoft Entra administrator: the
// server creates its role (named as the identity: the user of
// BOSUN_DATABASE_URL) with the rights of the password administrator
// (azure_pg_admin, CREATEROLE, CREATEDB), so `bosun migrate` creates, and
// then owns, bosun's tables in the bosun database. No SQL step for a person.
// After the database: one change at a time.
resource databaseAdministrator 'Microsoft.DBforPostgreSQL/flexibleServers/administrators@2024-08-01' = {
  parent: postgres
  name: databaseIdentity.properties.principalId
  properties: {
    principalName: databaseIdentity.name
    principalType: 'ServicePrincipal'
    tenantId: subscription().tenantId
  }
  dependsOn: [database]
}

// -- Identities: one per consumer, the API's, KEDA's ---------------------------------

resource identities 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = [
  for identity in topology.identities: {
    name: identity.name
    location: location
  }
]

resource federatedCredentials 'Microsoft.ManagedIdentity/userAssignedIdentities/federatedIdentityCredentials@2023-01-31' = [
  for (identity, i) in topology.identities: {
    parent: identities[i]
    name: 'aks'
    properties: {
      issuer: aksOidcIssuerUrl
      subject: identity.kedaOperator ? 'system:serviceaccount:${kedaNamespace}:${kedaServiceAccount}' : 'system:serviceaccount:${kubernetesNamespace}:${identity.serviceAccount}'
      audiences: ['api://AzureADTokenExchange']
    }
  }
]

// -- Least-privilege role assignments ---------------------------------------------

resource queueGrants 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for grant in topology.grants.queues: {
    name: guid(queues[grant.queue].id, identities[grant.identity].id, roles[grant.role])
    scope: queues[grant.queue]
    properties: {
      roleDefinitionId: roles[grant.role]
      principalId: identities[grant.identity].properties.principalId
      principalType: 'ServicePrincipal'
    }
  }
]

resource subscriptionGrants 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for grant in topology.grants.subscriptions: {
    name: guid(subscriptions[grant.subscription].id, identities[grant.identity].id, roles.serviceBusDataReceiver)
    scope: subscriptions[grant.subscription]
    properties: {
      roleDefinitionId: roles.serviceBusDataReceiver
      principalId: identities[grant.identity].properties.principalId
      principalType: 'ServicePrincipal'
    }
  }
]

resource topicGrants 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for grant in topology.grants.topic: {
    name: guid(topic.id, identities[grant.identity].id, roles.serviceBusDataSender)
    scope: topic
    properties: {
      roleDefinitionId: roles.serviceBusDataSender
      principalId: identities[grant.identity].properties.principalId
      principalType: 'ServicePrincipal'
    }
  }
]

resource namespaceGrants 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for grant in topology.grants.namespace: {
    name: guid(serviceBus.id, identities[grant.identity].id, roles[grant.role])
    scope: serviceBus
    properties: {
      roleDefinitionId: roles[grant.role]
      principalId: identities[grant.identity].properties.principalId
      principalType: 'ServicePrincipal'
    }
  }
]

resource containerGrants 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for grant in filter(topology.grants.blobs, g => g.container != null): {
    name: guid(containers[grant.container].id, identities[grant.identity].id, roles.storageBlobDataContributor)
    scope: containers[grant.container]
    properties: {
      roleDefinitionId: roles.storageBlobDataContributor
      principalId: identities[grant.identity].properties.principalId
      principalType: 'ServicePrincipal'
    }
  }
]

resource accountGrants 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for grant in filter(topology.grants.blobs, g => g.container == null): {
    name: guid(storage.id, identities[grant.identity].id, roles.storageBlobDataContributor)
    scope: storage
    properties: {
      roleDefinitionId: roles.storageBlobDataContributor
      principalId: identities[grant.identity].properties.principalId
      principalType: 'ServicePrincipal'
    }
  }
]

// -- What the overlay needs ----------------------------------------------------------

@description('The client id of each component\'s identity: the azure.workload.identity/client-id of its ServiceAccount (KEDA\'s goes to the KEDA operator).')
output clientIds array = [
  for (identity, i) in topology.identities: {
    component: identity.component
    clientId: identities[i].properties.clientId
  }
]

@description('BOSUN_SERVICEBUS_NAMESPACE.')
output serviceBusNamespace string = serviceBus.name

@description('BOSUN_BLOB_URL.')
output blobUrl string = storage.properties.primaryEndpoints.blob

@description('The PostgreSQL host for BOSUN_DATABASE_URL.')
output postgresHost string = postgres.properties.fullyQualifiedDomainName

@description('BOSUN_DATABASE_CLIENT_ID: the client id of the identity every component signs in to PostgreSQL as.')
output databaseClientId string = databaseIdentity.properties.clientId

@description('The PostgreSQL user of BOSUN_DATABASE_URL: the database identity\'s name.')
output databaseUser string = databaseIdentity.name
"#;
