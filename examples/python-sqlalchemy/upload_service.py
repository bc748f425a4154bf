#!/usr/bin/env python3
"""A document-upload service that tells the world about each upload through pg_outbox.

Saving an upload writes two business rows (the file and the task that processes it) and
enqueues a "source_file.uploaded" event, all in one transaction. If anything fails before
the commit, the rows and the event go together: no webhook announces a file that was
never saved. (Publishing to a broker from inside the transaction would have sent it.)

Connects with the usual libpq variables (PGHOST, PGPORT, PGDATABASE, PGUSER,
PGPASSWORD) or DATABASE_URL, as the application role of ../setup.sql.

    python3 upload_service.py --uploads 12 --fail-every 3
"""

import argparse
import hashlib
import json
import os
import sys
import uuid

from sqlalchemy import BigInteger, Column, ForeignKey, Text, create_engine, text
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, declarative_base, relationship

Base = declarative_base()


class SourceFile(Base):
    __tablename__ = "source_files"

    id = Column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    filename = Column(Text, nullable=False)
    sha256 = Column(Text, nullable=False)
    size_bytes = Column(BigInteger, nullable=False)


class Task(Base):
    __tablename__ = "tasks"

    id = Column(BigInteger, primary_key=True)  # an identity column: the database numbers it
    source_file_id = Column(UUID(as_uuid=True), ForeignKey("source_files.id"), nullable=False)
    kind = Column(Text, nullable=False)
    source_file = relationship(SourceFile)


ENQUEUE = text(
    "SELECT outbox.enqueue(:endpoint, CAST(:payload AS jsonb),"
    " event_type => :event_type, idempotency_key => :idempotency_key)"
)


def save_upload(session, filename, content, task_kind="extract_text"):
    """Saves an upload and its event in the caller's transaction; returns the file's id."""
    source = SourceFile(
        id=uuid.uuid4(),
        filename=filename,
        sha256=hashlib.sha256(content).hexdigest(),
        size_bytes=len(content),
    )
    session.add(source)
    session.flush()  # a file the database refuses fails here, before its event exists

    # The event is a row in the same transaction, not a network call: it is sent after
    # the commit, and never if the transaction rolls back.
    session.execute(
        ENQUEUE,
        {
            "endpoint": "documents",
            "payload": json.dumps(
                {
                    "source_file_id": str(source.id),
                    "filename": source.filename,
                    "sha256": source.sha256,
                    "size_bytes": source.size_bytes,
                }
            ),
            "event_type": "source_file.uploaded",
            # The receiver sees it as webhook-id: its key to drop a repeated delivery.
            "idempotency_key": f"source_file:{source.id}:uploaded",
        },
    )

    # Saving the task can still fail after the enqueue (here: a kind the database
    # refuses). The exception rolls back the file row and the event with it.
    session.add(Task(source_file=source, kind=task_kind))
    session.flush()
    return source.id


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=5, help="how many uploads to make")
    parser.add_argument("--fail-every", type=int, default=0,
                        help="make every Nth upload fail after its enqueue (0: none)")
    parser.add_argument("--prefix", default="py", help="file names are PREFIX-<n>.pdf")
    args = parser.parse_args()

    # "postgresql+psycopg2://" alone lets libpq read PGHOST, PGUSER and the rest.
    engine = create_engine(os.environ.get("DATABASE_URL", "postgresql+psycopg2://"), future=True)

    failed = 0
    for n in range(1, args.uploads + 1):
        filename = f"{args.prefix}-{n:03}.pdf"
        content = f"%PDF-1.7 document {n} of batch {args.prefix}".encode()
        doomed = args.fail_every > 0 and n % args.fail_every == 0
        try:
            # One transaction per upload: committed when the block ends, rolled back if
            # it raises.
            with Session(engine) as session, session.begin():
                source_id = save_upload(session, filename, content,
                                        task_kind="unknown" if doomed else "extract_text")
            print(f"committed {filename} {source_id}")
        except SQLAlchemyError as err:
            failed += 1
            reason = getattr(err, "orig", None) or err  # the driver's error, when there is one
            print(f"rolled back {filename}: {str(reason).splitlines()[0]}")
    print(f"{args.uploads - failed} committed, {failed} rolled back")
    engine.dispose()
    # A failed upload is what the demo asks for; only an unexpected count is an error.
    expected = args.uploads // args.fail_every if args.fail_every > 0 else 0
    return 0 if failed == expected else 1


if __name__ == "__main__":
    sys.exit(main())
