# SPDX-License-Identifier: Apache-2.0
"""Alembic environment: runs on the connection cyborg.db.migration hands in."""

from alembic import context

from cyborg.db import models

connection = context.config.attributes['connection']
context.configure(connection=connection,
                  target_metadata=models.Base.metadata,
                  render_as_batch=connection.dialect.name == 'sqlite')
with context.begin_transaction():
    context.run_migrations()
