"""
Generate the demo's source data: authors in a CSV file, their books in a SQLite table.

The data is deterministic for a given seed. A few records are invalid on purpose (an author with
a malformed email, books with an empty title) so the destination rejects them permanently;
:func:`fix_authors` and :func:`fix_books` correct exactly those, as a data steward would.

Run it alone with ``python generate_data.py OUT_DIR [--authors N] [--seed S]``.
"""

from __future__ import annotations

import argparse
import csv
import random
import sqlite3
from pathlib import Path

import attrs

AUTHORS_FILE = "authors.csv"
BOOKS_FILE = "books.db"
AUTHOR_FIELDS = ("id", "name", "email", "country", "born", "updated_at")

_FIRST = [
    "Ada",
    "Agnes",
    "Alan",
    "Alice",
    "Amara",
    "Anton",
    "Aria",
    "Bea",
    "Boris",
    "Carla",
    "Chen",
    "Clara",
    "Dmitri",
    "Elena",
    "Emil",
    "Eva",
    "Farid",
    "Freya",
    "Gita",
    "Hana",
    "Hugo",
    "Ines",
    "Ivan",
    "Jonas",
    "Julia",
    "Kai",
    "Kenji",
    "Lara",
    "Leo",
    "Lina",
    "Luca",
    "Maya",
    "Mei",
    "Milan",
    "Nadia",
    "Nina",
    "Noor",
    "Olga",
    "Omar",
    "Paulo",
    "Priya",
    "Rafael",
    "Rosa",
    "Sami",
    "Sara",
    "Selim",
    "Sofia",
    "Tariq",
    "Tomas",
    "Uma",
    "Vera",
    "Yusuf",
    "Zara",
]
_LAST = [
    "Abara",
    "Bauer",
    "Becker",
    "Costa",
    "Dubois",
    "Eriksen",
    "Fischer",
    "Garcia",
    "Haddad",
    "Hansen",
    "Ibrahim",
    "Ito",
    "Jensen",
    "Kowalski",
    "Kumar",
    "Larsen",
    "Lopez",
    "Meyer",
    "Moreau",
    "Nakamura",
    "Novak",
    "Okafor",
    "Olsen",
    "Petrov",
    "Popescu",
    "Quinn",
    "Rossi",
    "Sato",
    "Schmidt",
    "Silva",
    "Singh",
    "Tanaka",
    "Torres",
    "Varga",
    "Weber",
    "Wright",
    "Yilmaz",
    "Zhang",
]
_COUNTRIES = [
    "AR",
    "BR",
    "CA",
    "CN",
    "DE",
    "EG",
    "ES",
    "FR",
    "GB",
    "IN",
    "IT",
    "JP",
    "KE",
    "MX",
    "NG",
    "NL",
    "NO",
    "PL",
    "PT",
    "SE",
    "TR",
    "US",
]
_WORDS = [
    "silent",
    "river",
    "garden",
    "winter",
    "empire",
    "glass",
    "letters",
    "night",
    "harbor",
    "orchard",
    "machine",
    "city",
    "shadow",
    "summer",
    "island",
    "mirror",
    "journey",
    "lantern",
    "north",
    "signal",
    "archive",
    "salt",
    "paper",
    "storm",
    "quiet",
    "theory",
    "house",
    "memory",
    "bridge",
    "forest",
    "atlas",
    "distant",
    "kingdom",
    "fever",
    "color",
    "last",
    "small",
    "second",
]


@attrs.frozen
class Generated:
    """What :func:`generate` wrote and which records it made invalid on purpose."""

    authors_csv: Path
    books_db: Path
    authors: int
    books: int
    bad_author_ids: tuple[str, ...]
    bad_book_ids: tuple[int, ...]


def _title(rng: random.Random) -> str:
    words = rng.sample(_WORDS, rng.randint(2, 4))
    return " ".join(["The", *words] if rng.random() < 0.3 else words).title()


def generate(
    out_dir: Path, *, authors: int = 2_000, seed: int = 7, bad_authors: int = 3, bad_books: int = 5
) -> Generated:
    """
    Write ``authors.csv`` and ``books.db`` (table ``books``) into *out_dir*, replacing them.

    Each author has 1 to 5 books (about 3 on average). *bad_authors* authors get a malformed
    email and *bad_books* books an empty title; every choice comes from ``random.Random(seed)``.
    """
    rng = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    author_ids = [f"A{n:05d}" for n in range(1, authors + 1)]
    bad_author_ids = tuple(sorted(rng.sample(author_ids, bad_authors)))
    rows: list[dict[str, str]] = []
    for author_id in author_ids:
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        email = f"{first}.{last}{rng.randint(1, 99)}@example.org".lower()
        if author_id in bad_author_ids:
            email = email.replace("@", " at ")  # what a hand-typed import looks like
        rows.append(
            {
                "id": author_id,
                "name": f"{first} {last}",
                "email": email,
                "country": rng.choice(_COUNTRIES),
                "born": str(rng.randint(1900, 1999)),
                "updated_at": "2024-01-01T00:00:00Z",
            }
        )
    authors_csv = out_dir / AUTHORS_FILE
    with authors_csv.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=AUTHOR_FIELDS)
        writer.writeheader()
        writer.writerows(rows)

    books: list[tuple[int, str, str, str, int, int, int]] = []
    for author_id in author_ids:
        for _ in range(rng.choice((1, 2, 2, 3, 3, 3, 4, 4, 5))):
            book_id = len(books) + 1
            isbn = "978" + "".join(str(rng.randint(0, 9)) for _ in range(10))
            year, pages = rng.randint(1930, 2023), rng.randint(80, 900)
            books.append((book_id, author_id, _title(rng), isbn, year, pages, 1))
    bad_book_ids = tuple(sorted(rng.sample(range(1, len(books) + 1), bad_books)))
    for book_id in bad_book_ids:
        b = books[book_id - 1]
        books[book_id - 1] = (b[0], b[1], "", b[3], b[4], b[5], b[6])

    books_db = out_dir / BOOKS_FILE
    books_db.unlink(missing_ok=True)
    with sqlite3.connect(books_db) as db:
        db.execute(
            "CREATE TABLE books (id INTEGER PRIMARY KEY, author_id TEXT NOT NULL, title TEXT NOT "
            "NULL, isbn TEXT NOT NULL, year INTEGER NOT NULL, pages INTEGER NOT NULL, "
            "revision INTEGER NOT NULL)"
        )
        db.executemany("INSERT INTO books VALUES (?, ?, ?, ?, ?, ?, ?)", books)
    db.close()
    return Generated(authors_csv, books_db, authors, len(books), bad_author_ids, bad_book_ids)


def fix_authors(generated: Generated) -> None:
    """Correct the malformed emails in ``authors.csv``, bumping those rows' ``updated_at``."""
    with generated.authors_csv.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        if row["id"] in generated.bad_author_ids:
            row["email"] = row["email"].replace(" at ", "@")
            row["updated_at"] = "2024-06-01T00:00:00Z"
    with generated.authors_csv.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=AUTHOR_FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def fix_books(generated: Generated) -> None:
    """Give the untitled books a title, bumping their ``revision``."""
    with sqlite3.connect(generated.books_db) as db:
        db.executemany(
            "UPDATE books SET title = ?, revision = revision + 1 WHERE id = ?",
            [(f"Untitled Manuscript No. {book_id}", book_id) for book_id in generated.bad_book_ids],
        )
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--authors", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    g = generate(args.out_dir, authors=args.authors, seed=args.seed)
    print(f"{g.authors} authors -> {g.authors_csv}, {g.books} books -> {g.books_db}")


if __name__ == "__main__":
    main()
