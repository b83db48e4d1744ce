"""Grading a course's attention homework: ``attnmt grade SUBMISSIONS --class NAME --out DIR``.

    submissions   find a course's submissions, and the digest of each
    containment   what a submission's process may do (limits, Landlock, an audit hook)
    worker        the process that checks one submission
    rubric        points per check
    gradebook     the rows, as CSV, markdown and HTML
    course        grade_course: one contained worker per submission, resumable
"""

from attnmt.course.grading import CHECKS, grade_course

__all__ = ["CHECKS", "grade_course"]
