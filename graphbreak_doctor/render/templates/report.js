// graphbreak-doctor report: filtering and folding. The page is complete
// without this script; it only adds the filter form and expand/collapse.
(function () {
  "use strict";
  var form = document.getElementById("filters");
  var cards = Array.prototype.slice.call(document.querySelectorAll("article.card"));

  function checked(name) {
    var out = {};
    form.querySelectorAll('input[name="' + name + '"]').forEach(function (box) {
      out[box.value] = box.checked;
    });
    return out;
  }

  function apply() {
    var categories = checked("category"), packages = checked("package"), shown = 0;
    cards.forEach(function (card) {
      var visible = categories[card.dataset.category] !== false && packages[card.dataset.package] !== false;
      card.hidden = !visible;
      if (visible) shown += 1;
    });
    document.getElementById("shown").textContent = shown + " of " + cards.length + " breaks shown";
  }

  function fold(open) {
    document.querySelectorAll("main details").forEach(function (d) { d.open = open; });
  }

  if (form) {
    form.hidden = false;
    form.addEventListener("change", apply);
    form.addEventListener("click", function (event) {
      var action = event.target.getAttribute("data-action");
      if (action === "show-all") {
        form.querySelectorAll("input[type=checkbox]").forEach(function (box) { box.checked = true; });
        apply();
      } else if (action === "expand") {
        fold(true);
      } else if (action === "collapse") {
        fold(false);
      }
    });
    apply();
  }

  // A printed report shows everything: unfold before printing, restore after.
  var folded = [];
  window.addEventListener("beforeprint", function () {
    folded = Array.prototype.filter.call(document.querySelectorAll("details"), function (d) { return !d.open; });
    folded.forEach(function (d) { d.open = true; });
  });
  window.addEventListener("afterprint", function () {
    folded.forEach(function (d) { d.open = false; });
    folded = [];
  });
})();
