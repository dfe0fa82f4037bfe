"""``virtplane``: the command line, a thin HTTP client of the virtplane server (plus ``serve``)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

import virtplane
from virtplane.cli import (
    backup,
    console,
    explain,
    hosts,
    images,
    login,
    rebalance,
    resources,
    secrets,
    serve_limits,
    settings,
    store_restore,
    tokens,
    top,
    vms,
    vnc,
)
from virtplane.cli.config import config_section, load_config
from virtplane.cli.context import CliOverrides, CliState, SystemClock, checked_url
from virtplane.cli.credentials import saved_token
from virtplane.cli.errors import DEFAULT_URL, CliError
from virtplane.cli.exit_codes import exit_code_for, exit_code_table
from virtplane.cli.output import make_console, print_error
from virtplane.cli.tls import normalize_fingerprint

__all__ = ["app", "main"]


class VirtplaneGroup(TyperGroup):
    """The root command group: turns every ``CliError`` into ``Error (reason): message`` and
    its exit code (``exit_codes``)."""

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click Context
        try:
            return super().invoke(ctx)
        except CliError as error:
            print_error(make_console(stderr=True), error.reason, error.message)
            raise typer.Exit(exit_code_for(error)) from None


app = typer.Typer(
    name="virtplane",
    cls=VirtplaneGroup,
    help="virtplane: keep every VM in the power state its owner asked for.\n\n"
    "Talks to a virtplane server over HTTP; start one with `virtplane serve --demo`.",
    epilog="Examples:\n"
    "  virtplane serve --demo\n"
    "  virtplane get vms\n"
    "  virtplane --url http://10.0.0.5:8470 --token $TOKEN get hosts -o wide\n"
    "  virtplane apply -f fleet.yaml\n"
    "  virtplane vm stop web-1 --wait\n\n"
    "Shell completion: virtplane --install-completion (bash, zsh, fish, PowerShell).\n\n"
    f"Exit codes:\n{exit_code_table()}",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"virtplane {virtplane.__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    url: Annotated[
        str,
        typer.Option(
            "--url", envvar="VIRTPLANE_URL", callback=checked_url, help="Base URL of the virtplane server."
        ),
    ] = DEFAULT_URL,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="VIRTPLANE_TOKEN",
            help="API token, sent as 'Authorization: Bearer TOKEN'. `serve` prints the admin token; "
            "without one, the session `virtplane login` kept for --url is used.",
            show_default=False,
        ),
    ] = None,
    ca_file: Annotated[
        Path | None,
        typer.Option(
            "--ca-file",
            envvar="VIRTPLANE_CA_FILE",
            dir_okay=False,
            help="PEM file of the CA(s) that signed the server's certificate (default: the system's).",
            show_default=False,
        ),
    ] = None,
    tls_fingerprint: Annotated[
        str | None,
        typer.Option(
            "--tls-fingerprint",
            envvar="VIRTPLANE_TLS_FINGERPRINT",
            callback=normalize_fingerprint,
            help="Trust only the certificate with this SHA-256 fingerprint (AB:CD:..., as `serve` "
            "prints it); replaces CA checks.",
            show_default=False,
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """virtplane: keep every VM in the power state its owner asked for."""
    overrides = ctx.obj if isinstance(ctx.obj, CliOverrides) else CliOverrides()
    state = CliState(
        url=url,
        token=token or saved_token(url),
        transport=overrides.transport,
        browser=overrides.browser,
        clock=overrides.clock or SystemClock(),
        ca_file=ca_file,
        tls_fingerprint=tls_fingerprint,
    )
    ctx.obj = state
    ctx.call_on_close(state.close)


class ServeRole(StrEnum):
    ALL = "all"
    API = "api"
    CONTROLLERS = "controllers"


class LogLevel(StrEnum):
    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    DEBUG = "debug"


@app.command(
    epilog="Examples:\n"
    "  virtplane serve --demo\n"
    "  virtplane serve --data-dir /var/lib/virtplane --host 0.0.0.0 --port 8470\n"
    "  virtplane serve --db postgresql+psycopg://virtplane@db/virtplane\n"
    "  virtplane serve --workers 4                  # 4 API processes and the controllers' process\n"
    "  virtplane serve --role api --workers 4 --db postgresql+psycopg://virtplane@db/virtplane\n"
    "  virtplane serve --config /etc/virtplane/virtplane.toml --log-level debug",
)
def serve(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="A TOML file of these flags, keys without '--' (data-dir = \"/var/lib/virtplane\"); "
            "a flag given here wins over the file.",
            is_eager=True,
            callback=load_config,
            dir_okay=False,
            show_default=False,
        ),
    ] = None,
    demo: Annotated[
        bool, typer.Option("--demo", help="Add simulated hosts, pools and VMs (only what is missing).")
    ] = False,
    data_dir: Annotated[
        Path,
        typer.Option("--data-dir", help="Where the SQLite database and admin.token live."),
    ] = Path("virtplane-data"),
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")] = 8470,
    db: Annotated[
        str | None,
        typer.Option(
            "--db", help="SQLAlchemy database URL; default SQLite under --data-dir.", show_default=False
        ),
    ] = None,
    log_level: Annotated[
        LogLevel, typer.Option("--log-level", case_sensitive=False, help="Server log level.")
    ] = LogLevel.INFO,
    log_format: Annotated[
        str,
        typer.Option("--log-format", help="text, or json for one JSON object per line (structured logs)."),
    ] = "text",
    sim_boot_seconds: Annotated[
        float, typer.Option("--sim-boot-seconds", min=0.0, help="How long a simulated guest takes to boot.")
    ] = 1.5,
    sim_shutdown_seconds: Annotated[
        float,
        typer.Option(
            "--sim-shutdown-seconds", min=0.0, help="How long a simulated guest takes to power off."
        ),
    ] = 0.5,
    sim_link_mib_s: Annotated[
        float,
        typer.Option(
            "--sim-link-mib-s",
            min=0.001,
            help="The simulated hosts' migration link in MiB/s: a live migration copies the guest's "
            "memory (and local disks) at this rate (the demo's 28 GiB block migration takes 28 s at "
            "the default; tests raise it).",
        ),
    ] = 1000.0,
    lease_seconds: Annotated[
        float,
        typer.Option(
            "--leader-lease-seconds",
            min=1.0,
            help="With PostgreSQL replicas: how long the leader's lease lasts; another replica takes "
            "over this long after the leader died.",
        ),
    ] = 15.0,
    tls_cert: Annotated[
        Path | None,
        typer.Option(
            "--tls-cert",
            dir_okay=False,
            help="PEM certificate (chain) to serve HTTPS with; SIGHUP reloads it and --tls-key.",
            show_default=False,
        ),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option("--tls-key", dir_okay=False, help="PEM private key of --tls-cert.", show_default=False),
    ] = None,
    secrets_key_file: Annotated[
        Path | None,
        typer.Option(
            "--secrets-key-file",
            dir_okay=False,
            help="The key that seals Secrets' passwords (default DATA_DIR/secrets.key, made 0600 at "
            "first start); keep a copy apart from the database's backups.",
            show_default=False,
        ),
    ] = None,
    insecure_http: Annotated[
        bool,
        typer.Option(
            "--insecure-http",
            help="Allow plain HTTP on a non-loopback --host (behind a TLS proxy); logs a warning.",
        ),
    ] = False,
    role: Annotated[
        ServeRole,
        typer.Option(
            "--role",
            case_sensitive=False,
            help="all: the API and the controllers; api: admission, writes, watches and the "
            "dashboard, no controller; controllers: the leader-elected controllers, no public "
            "listener (/healthz and /metrics on 127.0.0.1:--health-port).",
        ),
    ] = ServeRole.ALL,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            help="API processes sharing the listening socket; more than one: serve supervises "
            "them (and with --role all one controllers' process beside them), restarting any that dies.",
        ),
    ] = 1,
    health_port: Annotated[
        int,
        typer.Option(
            "--health-port",
            min=1,
            max=65535,
            help="The controllers' process: /healthz and /metrics on 127.0.0.1 at this port.",
        ),
    ] = 8471,
    max_header_bytes: serve_limits.MaxHeaderBytes = 32 * 1024,
    max_headers: serve_limits.MaxHeaders = 100,
    header_timeout: serve_limits.HeaderTimeout = 10.0,
    idle_timeout: serve_limits.IdleTimeout = 5,
    max_connections: serve_limits.MaxConnections = 1000,
    max_connections_per_client: serve_limits.MaxConnectionsPerClient = 100,
    max_watches_per_token: serve_limits.MaxWatchesPerToken = 50,
    writes_per_second: serve_limits.WritesPerSecond = 100.0,
    write_burst: serve_limits.WriteBurst = 200,
) -> None:
    """Run the control plane: API, controllers and dashboard, until interrupted.

    The admin token is printed at start and kept in DATA_DIR/admin.token. One server per data
    directory: a second one on the same directory exits at once.
    """
    try:
        # Imported here: the server pulls in FastAPI, SQLAlchemy and uvicorn, which the
        # client commands do not need.
        from virtplane.api.limits import RequestLimits
        from virtplane.http_limits import ConnectionLimits
        from virtplane.server import ServeOptions, ServeRefused, run_server
    except ImportError as error:
        raise CliError("ServerUnavailable", f"the virtplane server cannot be loaded: {error}") from error
    identity = _identity(config)
    try:
        run_server(
            ServeOptions(
                data_dir=data_dir,
                host=host,
                port=port,
                db_url=db,
                demo=demo,
                log_level=log_level.value,
                log_format=log_format,
                sim_boot_seconds=sim_boot_seconds,
                sim_shutdown_seconds=sim_shutdown_seconds,
                sim_link_mib_s=sim_link_mib_s,
                lease_s=lease_seconds,
                tls_cert=tls_cert,
                tls_key=tls_key,
                insecure_http=insecure_http,
                secrets_key_file=secrets_key_file,
                connection_limits=ConnectionLimits(
                    max_header_bytes=max_header_bytes,
                    max_headers=max_headers,
                    header_timeout_s=header_timeout,
                    idle_timeout_s=idle_timeout,
                    max_connections=max_connections,
                    max_connections_per_client=max_connections_per_client,
                ),
                request_limits=RequestLimits(
                    max_watches_per_token=max_watches_per_token,
                    writes_per_second=writes_per_second,
                    write_burst=write_burst,
                ),
                identity=identity,
                role=role.value,
                workers=workers,
                health_port=health_port,
            )
        )
    except ServeRefused as refused:
        raise CliError(refused.reason, str(refused)) from None


def _identity(config: Path | None) -> Any:
    """The ``[identity]`` settings of the config file (None without one); a usage error if wrong."""
    table = None if config is None else config_section(config, "identity")
    if table is None:
        return None
    from virtplane.identity.config import IdentityConfigError, identity_settings

    try:
        return identity_settings(table, str(config))
    except IdentityConfigError as error:
        raise typer.BadParameter(str(error), param_hint="'--config'") from None


resources.register(app)
vms.register(app)
hosts.register(app)
settings.register(app)
console.register(app)
vnc.register(app)
secrets.register(app)
explain.register(app)
backup.register(app)
images.register(app)
rebalance.register(app)
store_restore.register(app)
tokens.register(app)
login.register(app)
top.register(app)


def main() -> None:
    """The console script entry point."""
    app()


if __name__ == "__main__":
    main()
