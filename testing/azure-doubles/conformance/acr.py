"""The ACR Tasks and Entra doubles driven by Microsoft's Python SDKs.

azure-identity (ClientSecretCredential, WorkloadIdentityCredential, with
MSAL under them) gets tokens from the Entra double;
azure-mgmt-containerregistry's ContainerRegistryManagementClient at
api-version 2019-06-01-preview calls the ACR double's ARM operations with
them: registries.get_build_source_upload_url, registries.begin_schedule_run,
runs.get, runs.get_log_sas_url. Prints a line per check ("ok ..." or
"FAIL ..."), exits non-zero when one fails.

Both SDKs refuse plain http for a credential's authority
(azure.identity normalize_authority: "must be a TLS protected (https)
URL") and for a bearer token (azure.core BearerTokenCredentialPolicy's
enforce_https), so the clients are given https hosts (login.entra.test,
management.acr.test, and login.microsoftonline.com, where MSAL asks for
instance discovery) and a transport, the SDKs' documented `transport=`
option, that sends those requests to the doubles' loopback ports over
http with the Host and X-Forwarded-Proto a TLS-terminating proxy would
send (the Entra double builds its metadata's URLs from them, as MSAL takes
the token endpoint from there). Everything above the transport is the
SDKs' own.

Environment: ENTRA_URL, ARM_URL, TENANT_ID, CLIENT_ID, CLIENT_SECRET,
AZURE_FEDERATED_TOKEN_FILE, SUBSCRIPTION, RESOURCE_GROUP, REGISTRY,
LOGIN_SERVER.
"""

import gzip
import io
import os
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request

from azure.core.exceptions import ClientAuthenticationError, ResourceNotFoundError
from azure.core.pipeline.transport import RequestsTransport
from azure.identity import ClientSecretCredential, WorkloadIdentityCredential
from azure.mgmt.containerregistry import ContainerRegistryManagementClient
from azure.mgmt.containerregistry.v2019_06_01_preview import models

API_VERSION = "2019-06-01-preview"
ARM_SCOPE = "https://management.azure.com/.default"
AUTHORITY = "login.entra.test"
ARM_HOST = "management.acr.test"

env = os.environ
failures = []


def check(name, condition, detail=""):
    if condition:
        print(f"ok {name}")
    else:
        print(f"FAIL {name}: {detail}")
        failures.append(name)


class Loopback(RequestsTransport):
    """Sends the SDKs' https requests for the test hosts to the doubles."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.routes = {
            AUTHORITY: env["ENTRA_URL"],
            "login.microsoftonline.com": env["ENTRA_URL"],
            ARM_HOST: env["ARM_URL"],
        }
        self.seen = []

    def send(self, request, **kwargs):
        original = request.url
        parsed = urllib.parse.urlsplit(original)
        if parsed.scheme == "https" and parsed.hostname in self.routes:
            target = urllib.parse.urlsplit(self.routes[parsed.hostname])
            request.url = urllib.parse.urlunsplit(
                (target.scheme, target.netloc, parsed.path, parsed.query, parsed.fragment)
            )
            # As a TLS-terminating proxy would: the double answers URLs
            # (MSAL's token endpoint from the OpenID metadata) on the host
            # and scheme the client asked.
            request.headers["Host"] = parsed.netloc
            request.headers["X-Forwarded-Proto"] = "https"
        self.seen.append(f"{request.method} {parsed.path}")
        try:
            return super().send(request, **kwargs)
        finally:
            # The SDKs read the request's URL back (MSAL's token cache
            # keys on it): they see the https URL they asked for.
            request.url = original


def context():
    """A gzipped tar with a Dockerfile and one file."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in [
            ("Dockerfile", b"FROM mcr.microsoft.com/dotnet/aspnet:9.0\nARG GREETING\nCOPY app/ /app/\nRUN echo $GREETING\n"),
            ("app/server.dll", b"server"),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue())


def main():
    transport = Loopback()
    tenant, client = env["TENANT_ID"], env["CLIENT_ID"]

    secret_credential = ClientSecretCredential(
        tenant, client, env["CLIENT_SECRET"], authority=AUTHORITY, transport=transport
    )
    token = secret_credential.get_token(ARM_SCOPE)
    check(
        "entra: ClientSecretCredential gets a token",
        token.token and token.expires_on > time.time() + 60,
        repr(token.expires_on),
    )
    check(
        "entra: MSAL asked the double's instance discovery and OpenID metadata",
        any("/common/discovery/instance" in seen for seen in transport.seen)
        and any("/v2.0/.well-known/openid-configuration" in seen for seen in transport.seen),
        transport.seen,
    )

    wrong = ClientSecretCredential(tenant, client, "not-the-secret", authority=AUTHORITY, transport=transport)
    try:
        wrong.get_token(ARM_SCOPE)
        check("entra: a wrong secret is refused", False, "a token came back")
    except ClientAuthenticationError as err:
        check("entra: a wrong secret is refused with AADSTS7000215", "AADSTS7000215" in str(err), str(err))

    workload = WorkloadIdentityCredential(
        tenant_id=tenant,
        client_id=client,
        token_file_path=env["AZURE_FEDERATED_TOKEN_FILE"],
        authority=AUTHORITY,
        transport=transport,
    )
    token = workload.get_token(ARM_SCOPE)
    check("entra: WorkloadIdentityCredential exchanges the federated token", bool(token.token))

    arm = ContainerRegistryManagementClient(
        workload,
        env["SUBSCRIPTION"],
        api_version=API_VERSION,
        base_url=f"https://{ARM_HOST}",
        transport=transport,
        polling_interval=0,
    )
    group, registry = env["RESOURCE_GROUP"], env["REGISTRY"]

    upload = arm.registries.get_build_source_upload_url(group, registry)
    check(
        "arm: get_build_source_upload_url gives an upload URL and a relative path",
        upload.upload_url and upload.relative_path and upload.relative_path.startswith("source/"),
        repr(upload),
    )
    put = urllib.request.Request(
        upload.upload_url, data=context(), method="PUT", headers={"x-ms-blob-type": "BlockBlob"}
    )
    with urllib.request.urlopen(put) as answer:
        check("storage: the context PUT to the SAS URL as a block blob", answer.status == 201, answer.status)

    request = models.DockerBuildRequest(
        source_location=upload.relative_path,
        docker_file_path="Dockerfile",
        image_names=["conformance/api:1.0.0"],
        is_push_enabled=True,
        no_cache=False,
        arguments=[models.Argument(name="GREETING", value="hello", is_secret=False)],
        platform=models.PlatformProperties(os="Linux", architecture="amd64"),
        timeout=3600,
    )
    run = arm.registries.begin_schedule_run(group, registry, request).result()
    check(
        "arm: begin_schedule_run answers the Run, Queued",
        run is not None and run.run_id and run.status == "Queued" and run.provisioning_state == "Succeeded",
        repr(run),
    )

    statuses = []
    current = run
    for _ in range(5):
        current = arm.runs.get(group, registry, run.run_id)
        statuses.append(current.status)
        if current.status in ("Succeeded", "Failed"):
            break
    check("arm: runs.get follows the run Running then Succeeded", statuses == ["Running", "Succeeded"], statuses)
    images = current.output_images or []
    check(
        "arm: the succeeded run lists its image in outputImages",
        len(images) == 1
        and images[0].registry == env["LOGIN_SERVER"]
        and (images[0].repository, images[0].tag) == ("conformance/api", "1.0.0")
        and (images[0].digest or "").startswith("sha256:"),
        repr(images),
    )

    log = arm.runs.get_log_sas_url(group, registry, run.run_id)
    with urllib.request.urlopen(log.log_link) as answer:
        text = answer.read().decode()
    check(
        "arm: get_log_sas_url gives a log link to the run's log",
        "Successfully pushed image: " + env["LOGIN_SERVER"] + "/conformance/api:1.0.0" in text,
        text,
    )

    try:
        arm.runs.get(group, registry, "cz999")
        check("arm: an unknown run is not found", False, "it was found")
    except ResourceNotFoundError as err:
        check("arm: an unknown run is ResourceNotFoundError", err.status_code == 404, str(err))
    try:
        arm.registries.get_build_source_upload_url(group, "fabrikam")
        check("arm: an unknown registry is not found", False, "it was found")
    except ResourceNotFoundError as err:
        check(
            "arm: an unknown registry is ResourceNotFoundError with ARM's error code",
            err.error is not None and err.error.code == "ResourceNotFound",
            str(err),
        )

    if failures:
        print(f"{len(failures)} check(s) failed: {failures}")
        sys.exit(1)


if __name__ == "__main__":
    main()
