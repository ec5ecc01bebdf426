# Declares myapp.emails, myapp.reports and myapp.webhooks, each with its
# dead-letter queue (myapp.emails.dead, ...), in the default virtual host.
resource "queuey_queue_set" "example" {
  prefix = "myapp"

  queues = {
    # x-max-priority 10, durable: the defaults.
    emails = {}

    # Not a priority queue; reports nobody read within a day expire.
    reports = {
      max_priority = 0
      message_ttl  = "24h"
    }

    webhooks = {
      max_priority = 5
      message_ttl  = "90s"
    }
  }
}

# The broker names, for the applications that use the queues.
output "emails_queue" {
  value = queuey_queue_set.example.queues["emails"].name
}
