"""The history, the comparison and comments: the pages where the team reads many
experiments and says what it thinks of one."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from experiments import submissions
from experiments.results import selectors
from experiments.review import comparison, history, notifications
from experiments.review import services as review
from experiments.review.filters import CompareForm, HistoryFilterForm
from experiments.review.forms import CommentForm


@require_GET
def experiment_list(request):
    """The history. An invalid filter is reported above an empty list (status 400): a list
    that silently ignored it would look like an answer to the question asked."""
    filters = HistoryFilterForm(request.GET, choices=history.filter_choices(user=request.user))
    since = notifications.history_visit_record(user=request.user)
    context: dict[str, object] = {
        "filters": filters,
        "page_obj": None,
        "rows": [],
        "notices": notifications.notices_for(user=request.user, since=since),
    }
    if filters.is_valid():
        try:
            page = history.history_page(
                query=filters.query(user=request.user),
                user=request.user,
                number=filters.page_number,
                per_page=filters.page_size,
            )
        except history.NoSuchPage as error:
            filters.add_error("page", str(error))
        else:
            rows = history.history_rows(experiments=list(page), metric=filters.headline_metric)
            context |= {"page_obj": page, "rows": rows}
    return render(request, "experiments/list.html", context, status=400 if filters.errors else 200)


@require_GET
def experiment_compare(request):
    """Arms of two or more experiments side by side, with every difference between them."""
    form = CompareForm(request.GET, user=request.user)
    if not form.is_valid():
        return render(request, "experiments/compare.html", {"form": form}, status=400)
    result = comparison.comparison(experiments=form.cleaned_data["experiments"], arm_ids=form.arm_ids())
    context = {"form": form, "comparison": result, "chart_data": result.chart_data()}
    return render(request, "experiments/compare.html", context)


@require_POST
def comment_add(request, pk: int):
    experiment = selectors.experiment_for_user(user=request.user, pk=pk)
    form = CommentForm(request.POST)
    comments = f"{reverse('experiments:detail', args=[experiment.pk])}#comments"
    if not form.is_valid():
        # An ErrorList iterates over its messages as str; the stubs type the items as its errors.
        messages.error(request, "The comment was not saved: " + " ".join(form.errors["body"]))  # type: ignore[arg-type]
        return redirect(comments)

    def write() -> str:
        review.comment_add(experiment=experiment, author=request.user, body=form.cleaned_data["body"])
        return comments

    return submissions.redirect_once(request, write)
