"""Persistence: the database (schema, migrations), the file store, turns, resume, export.

What is stored where (``KIMI_DATA_DIR``, default ``data/``):

* ``chat.db`` (SQLite, unless ``KIMI_DATABASE_URL`` names a PostgreSQL server):
  the page's tables (``kimi_threads``, ``kimi_steps``, ``kimi_elements``,
  ``kimi_feedback``, ``kimi_page_users``: what the page shows,
  :mod:`backend.store.pages`), ``kimi_users`` (sign-in), ``kimi_turns`` and ``kimi_images`` (the
  conversation as the model saw it), ``kimi_compared`` (other models' answers, Compare),
  ``kimi_signin_attempts`` (bounds every UI worker shares: :mod:`backend.store.bounds`);
* ``files/<user id>/<element id>/<name>``: uploads as the person sent them
  (shown on the page);
* ``files/prepared/<thread id>/<sha256>.jpg|png|webp``: the prepared copies sent to
  the model.

The data folder and everything the store writes in it are private to the app's
account (folders ``0700``, files ``0600``: :mod:`backend.store.files`,
:mod:`backend.store.db`).

:class:`backend.store.core.Store` owns the engine, the file store and the writes held
while the database cannot take them (:mod:`backend.store.pending`); everything else
borrows them.

Import from the modules (``backend.store.core`` for :class:`Store`): this package's
``__init__`` imports nothing, so what needs only a file path or the HTML export does
not load SQLAlchemy (an app running open never opens a database).
"""
