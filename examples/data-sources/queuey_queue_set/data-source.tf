# Read a set another module (or an application) made, without managing it.
data "queuey_queue_set" "app" {
  prefix = "myapp"
}

# Fail the plan when dead letters pile up.
check "no_dead_letters_waiting" {
  assert {
    condition     = data.queuey_queue_set.app.queues["emails"].dead_messages < 100
    error_message = "myapp.emails.dead holds ${data.queuey_queue_set.app.queues["emails"].dead_messages} dead letters: queuey dead list --prefix myapp --queue emails"
  }
}

# Hand the set to an application, which loads it with queuey.LoadQueueSet.
output "queuey_set" {
  value = data.queuey_queue_set.app.runtime_config
}
