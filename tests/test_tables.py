"""specs.tables: a CSV input is refused in one line naming the file, the line, the column and the
value; the line numbers count from the header as line 1."""
from __future__ import annotations

import pytest

from specsim.errors import InputError, SpecError
from specsim.specs.tables import numeric_column, read_csv_table, require_columns, text_column


def test_damaged_files_are_input_errors_naming_the_path(tmp_path):
    cases = {"empty.csv": b"", "blank.csv": b"\n\n  \n", "nul.csv": b"a,b\n1,\x002\n", "latin1.csv": b"a,b\n\xe9,1\n",
             "utf16.csv": "a,b\n1,2\n".encode("utf-16"), "header.csv": b"a,b\n"}
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(InputError, match=name):
            read_csv_table(p)
    with pytest.raises(InputError, match="file not found"):
        read_csv_table(tmp_path / "missing.csv")
    with pytest.raises(InputError, match="a folder"):
        read_csv_table(tmp_path)


def test_a_byte_order_mark_and_blank_lines_are_tolerated(tmp_path):
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbfa,b\n1,x\n\n2,y\n")
    t = read_csv_table(p)
    assert list(t.columns) == ["a", "b"] and t["a"].tolist() == ["1", "2"]


def test_numeric_cells_are_refused_with_their_line(tmp_path):
    p = tmp_path / "t.csv"
    # line 1 is the header; the bad cell of each column sits on line 3
    p.write_text("n,x,name\n1,0.5,a\n2.5,nan,\n3,1e400,c\n")
    t = read_csv_table(p)
    with pytest.raises(SpecError, match=r"t.csv: line 3: column 'n' = '2.5': expected an integer"):
        numeric_column(t, "n", where=str(p), integer=True)
    with pytest.raises(SpecError, match=r"line 3: column 'x' = 'nan': expected a finite number"):
        numeric_column(t, "x", where=str(p))
    with pytest.raises(SpecError, match=r"line 3: column 'name' is empty"):
        text_column(t, "name", where=str(p))
    assert numeric_column(t.iloc[:1], "x", where="w", minimum=0.0, exclusive_minimum=True).tolist() == [0.5]
    with pytest.raises(SpecError, match=r"line 2: column 'x' = '0.5': expected a finite number > 1"):
        numeric_column(t.iloc[:1], "x", where="w", minimum=1.0, exclusive_minimum=True)
    with pytest.raises(InputError, match=r"missing column 'y'.*the header is 'n,x,name'"):
        require_columns(t, ["n", "y"], where=str(p))


def test_integers_from_two_to_the_53_are_refused():
    import pandas as pd

    # 2^53 - 1 is the largest integer below which every integer is a double; 2^53 + 1 would read as 2^53
    assert numeric_column(pd.DataFrame({"n": ["9007199254740991"]}), "n", where="w", integer=True).tolist() == [2 ** 53 - 1]
    t = pd.DataFrame({"n": ["1", "9007199254740993"]})
    with pytest.raises(SpecError, match="line 3: column 'n' = '9007199254740993'"):
        numeric_column(t, "n", where="w", integer=True)
