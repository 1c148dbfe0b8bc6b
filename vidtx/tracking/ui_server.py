"""The MLflow UI as `make ui` serves it: MLflow's own server (`mlflow ui --app-name vidtx`, an app of
MLflow's `mlflow.app` entry points, as its `basic-auth` is) opening in its model-training view.

MLflow 3.17 keeps its UI's view in the browser: a browser that has not chosen one opens on GenAI
(traces, sessions, judges) and, once there, an Assistant panel takes a quarter of the width. A link
that asks for the model-training view (`?workflowType=machine_learning`, as every link vidtx writes
does) opens it, but the next click (a run, a model) drops the parameter and the UI falls back to
GenAI. MLflow has no server setting for either, and it does not read the experiments'
`mlflow.experimentKind` tag while its GenAI / Model training switch is shown. So the page MLflow
serves gets the defaults a model-training team wants, set in the browser's storage where MLflow's UI
reads them and only where the browser has none: a choice made in the UI is kept.
"""

from __future__ import annotations

import json

from flask import Flask, Response, request

# the UI's storage keys (`<key>_v<version>`, values JSON) -> the default set where a browser has none
BROWSER_DEFAULTS = {
    "mlflow.workflowType_v1": "machine_learning",
    "mlflow.assistant.panelOpen_v1": False,
    "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": True,
}
_STORED = json.dumps({key: json.dumps(value) for key, value in BROWSER_DEFAULTS.items()})
DEFAULTS_SCRIPT = (
    f"<script>for (const [key, value] of Object.entries({_STORED})) "
    "{ if (localStorage.getItem(key) === null) localStorage.setItem(key, value); }</script>"
)


def with_browser_defaults(response: Response) -> Response:
    """The UI's page (`index.html`, served for `/`) with `DEFAULTS_SCRIPT` first in its head, run
    before MLflow's own scripts read the storage; any other response as it is."""
    if request.path != "/" or response.mimetype != "text/html" or response.status_code != 200:
        return response
    response.direct_passthrough = False  # a file MLflow sends as it is: read it to change it
    page = response.get_data(as_text=True)
    response.set_data(page.replace("<head>", f"<head>{DEFAULTS_SCRIPT}", 1))
    return response


def create_app(app: Flask | None = None) -> object:
    """MLflow's server app with the UI's defaults: the Flask app under waitress or gunicorn, wrapped in
    MLflow's FastAPI app under uvicorn (MLflow's default server), as MLflow builds its own."""
    from mlflow.environment_variables import _MLFLOW_SGI_NAME
    from mlflow.server import app as mlflow_app
    from mlflow.server.fastapi_app import create_fastapi_app

    flask_app = app or mlflow_app
    flask_app.after_request(with_browser_defaults)
    return create_fastapi_app(flask_app) if _MLFLOW_SGI_NAME.get() == "uvicorn" else flask_app
