"""Decisions: the on/off threshold and its config lines (`threshold`), the gate chosen by simulation
(`gates`), the verdict (`advise`), replicas and cost (`capacity`), two scenarios side by side
(`compare`). Each returns a frozen result; turning it into text, figures or a report is
`specsim.presentation`'s job. Nothing here imports presentation or cli."""
