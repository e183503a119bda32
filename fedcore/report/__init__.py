"""What a report says, rendered without a store: the families' answers, the summary over seeds,
the ranking per setting, the exploratory table, the across-settings section, the words around
them, the LaTeX tables, the claims table and the self-contained HTML page.

``page`` (the sweep report's header and body), ``families`` (each paper's question in words and
tables, the forest plot's input), ``summary`` (means and intervals per row and setting, training
state), ``ranking`` (rows ordered by the primary endpoint per setting), ``exploratory`` (the
table a reader compares), ``across_settings`` (rows pooled over settings), ``privacy`` (epsilon
per row), ``reference`` (the exploratory table's reference row), ``text`` (header lines,
description, figures section, how to read it), ``latex`` and ``paper_tables`` (what a paper can
paste), ``claims`` (the claims table and its tally), ``headline`` (what ``fedcore report``
prints), ``html`` (the page to send), ``files`` (all of a report's files or none). Gathering the
runs from MLflow and deciding the comparisons is ``fedcore.tracking.report``'s job; the figures
are ``fedcore.figures``'.
"""
