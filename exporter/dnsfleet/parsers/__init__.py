"""Pure parsers: text in, frozen typed dataclasses out. No I/O here."""
