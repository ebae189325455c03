"""How findings are shown: the terminal table, the HTML report and its plots."""
