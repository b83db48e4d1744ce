"""The course task: a student's homework report, and grading a course's attention classes.

    homework      run_homework: Part 2 of the handout with one class (``attnmt homework``)
    submissions   find a course's submissions, and the digest of each
    containment   what a submission's process may do (limits, Landlock, an audit hook)
    worker        the process that checks (and with --minutes trains) one submission
    rubric        points per check
    gradebook     the rows, as CSV, markdown and HTML
    grading       grade_course: one contained worker per submission, resumable (``attnmt grade``)
"""

from attnmt.course.grading import CHECKS, TRAINS, grade_course

__all__ = ["CHECKS", "TRAINS", "grade_course"]
