"""What a sweep left on an MLflow tracking server, printed as JSON: run by the tests where
the server is reachable (inside a private network namespace, `ip netns exec`).

    python mlflow_check.py TRACKING_URL EXPERIMENT PARENT_RUN_ID MODEL [POSTGRES_PORT]
"""

from __future__ import annotations

import json
import sys


def main(url: str, experiment: str, parent_id: str, model: str, pg_port: str = "") -> dict:
    import mlflow

    mlflow.set_tracking_uri(url)
    client = mlflow.MlflowClient()
    runs = mlflow.search_runs(experiment_names=[experiment], output_format="list")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent_id]
    nested = {c.data.tags["candidate"]: sorted(
        r.data.tags.get("role", "") for r in runs
        if r.data.tags.get("mlflow.parentRunId") == c.info.run_id) for c in children}
    parent = client.get_run(parent_id)
    versions = client.search_model_versions(f"name='{model}'")
    out = {
        "parent_tags": dict(parent.data.tags),
        "parent_artifacts": sorted(a.path for a in client.list_artifacts(parent_id)),
        "artifact_uri": parent.info.artifact_uri,
        "children": {c.data.tags["candidate"]: c.data.tags.get("decision") for c in children},
        "child_metrics": {c.data.tags["candidate"]: sorted(c.data.metrics) for c in children},
        "child_artifacts": {c.data.tags["candidate"]: sorted(
            a.path for a in client.list_artifacts(c.info.run_id)) for c in children},
        "nested": nested,
        "versions": {v.version: dict(v.tags) for v in versions},
    }
    try:
        out["recommended"] = dict(client.get_model_version_by_alias(model, "recommended").tags)
    except Exception as err:  # noqa: BLE001 - reported, the test decides
        out["recommended"] = {"error": type(err).__name__}
    if pg_port:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={pg_port} user=postgres dbname=mlflow") as c:
            out["postgres_runs"] = c.execute("select count(*) from runs").fetchone()[0]
            out["postgres_versions"] = c.execute(
                "select count(*) from model_versions").fetchone()[0]
    return out


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])))
