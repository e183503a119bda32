"""What a sweep's report says, rendered without a store: the self-contained HTML page
(`fedcore.report.html`) and the ranking per setting (`fedcore.report.ranking`).

Gathering the runs from MLflow and writing the files is `fedcore.tracking.report`'s job.
"""
